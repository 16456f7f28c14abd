# pip install agno openai openinference-instrumentation-agno opentelemetry-sdk opentelemetry-exporter-otlp-proto-http
import os

from agno.agent import Agent
from agno.models.openai import OpenAIChat
from openinference.instrumentation.agno import AgnoInstrumentor
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
AgnoInstrumentor().instrument(tracer_provider=provider)


def get_weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: The city.
    """
    return f"It is sunny in {city}."


agent = Agent(name="weather-bot", model=OpenAIChat(id="gpt-4o-mini"), tools=[get_weather])
# session_id is the session the run goes in.
print(agent.run("What is the weather in Lima?", session_id="ticket-4711").content)
provider.force_flush()  # a short script: send the spans before it exits
