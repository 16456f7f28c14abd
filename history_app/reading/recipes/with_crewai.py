# pip install crewai openinference-instrumentation-crewai openinference-instrumentation-openai opentelemetry-sdk opentelemetry-exporter-otlp-proto-http
import os

from openinference.instrumentation import using_session
from openinference.instrumentation.crewai import CrewAIInstrumentor
from openinference.instrumentation.openai import OpenAIInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

provider = TracerProvider()
provider.add_span_processor(
    BatchSpanProcessor(
        OTLPSpanExporter(
            endpoint="http://127.0.0.1:8000/v1/traces",
            headers={"Authorization": f"Bearer {os.environ['TOKEN']}"},
        )
    )
)
CrewAIInstrumentor().instrument(tracer_provider=provider)
# The OpenAI client's instrumentation beside it keeps each model call's messages as sent.
OpenAIInstrumentor().instrument(tracer_provider=provider)

from crewai import LLM, Agent, Crew, Task  # noqa: E402 (after instrumenting)
from crewai.tools import tool  # noqa: E402


@tool("get_weather")
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"It is sunny in {city}."


forecaster = Agent(
    role="Forecaster",
    goal="Tell the weather",
    backstory="You answer briefly.",
    tools=[get_weather],
    llm=LLM(model="openai/gpt-4o-mini", base_url=os.environ.get("OPENAI_BASE_URL")),
)
task = Task(description="What is the weather in {city}?", expected_output="One sentence.", agent=forecaster)
crew = Crew(name="Weather crew", agents=[forecaster], tasks=[task])
with using_session("ticket-4711"):  # the session the run goes in
    print(crew.kickoff(inputs={"city": "Lima"}).raw)
provider.force_flush()  # a short script: send the spans before it exits
