# pip install openai-agents openinference-instrumentation-openai-agents opentelemetry-sdk opentelemetry-exporter-otlp-proto-http
import os

from agents import Agent, Runner, function_tool, set_trace_processors
from openinference.instrumentation import using_session
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor
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
set_trace_processors([])  # the traces go here only, not to OpenAI's trace viewer too
OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"It is sunny in {city}."


agent = Agent(name="weather-bot", instructions="Answer briefly.", model="gpt-4o-mini", tools=[get_weather])
with using_session("ticket-4711"):  # the session the run goes in
    print(Runner.run_sync(agent, "What is the weather in Lima?").final_output)
provider.force_flush()  # a short script: send the spans before it exits
