"""A small crew run in CrewAI's own virtual environment by tests/test_framework_crewai.py:
two agents (a researcher with the ``weather`` tool, a writer), two sequential tasks, kicked
off once per city in one OpenInference session, its spans sent over OTLP/HTTP to the
dashboard. What a CrewAI user writes, with the model pointed at a fake OpenAI-compatible
server. The one argument is a JSON object: endpoint, token, base_url, session, cities."""

import json
import sys

from openinference.instrumentation import using_session
from openinference.instrumentation.crewai import CrewAIInstrumentor
from openinference.instrumentation.openai import OpenAIInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

config = json.loads(sys.argv[1])
provider = TracerProvider(resource=Resource.create({"service.name": "crew-test"}))
exporter = OTLPSpanExporter(
    endpoint=config["endpoint"], headers={"Authorization": f"Bearer {config['token']}"}
)
provider.add_span_processor(BatchSpanProcessor(exporter))
CrewAIInstrumentor().instrument(tracer_provider=provider)
OpenAIInstrumentor().instrument(tracer_provider=provider)

from crewai import LLM, Agent, Crew, Process, Task  # noqa: E402 (after instrumenting)
from crewai.tools import tool  # noqa: E402


@tool("weather")
def weather(city: str) -> str:
    """Get the weather in a city."""
    return f"Sunny in {city}"


llm = LLM(model="openai/gpt-4o-mini", base_url=config["base_url"], api_key="sk-test")
researcher = Agent(
    role="Researcher",
    goal="Find the weather",
    backstory="You look up the weather.",
    tools=[weather],
    llm=llm,
    allow_delegation=False,
)
writer = Agent(
    role="Writer",
    goal="Write a short report",
    backstory="You write briefly.",
    llm=llm,
    allow_delegation=False,
)
find = Task(description="Find the weather in {city}.", expected_output="The weather.", agent=researcher)
write = Task(
    description="Write one sentence about the weather in {city}.", expected_output="A sentence.", agent=writer
)
crew = Crew(name="Weather crew", agents=[researcher, writer], tasks=[find, write], process=Process.sequential)
with using_session(config["session"]):
    for city in config["cities"]:
        print(json.dumps({"city": city, "output": crew.kickoff(inputs={"city": city}).raw}), flush=True)
assert provider.force_flush(30_000), "the spans were not all exported"
provider.shutdown()
