# pip install pydantic-ai-slim[openai] opentelemetry-sdk opentelemetry-exporter-otlp-proto-http
import os

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from pydantic_ai import Agent
from pydantic_ai.models.instrumented import InstrumentationSettings

provider = TracerProvider()
provider.add_span_processor(
    BatchSpanProcessor(
        OTLPSpanExporter(
            endpoint="http://127.0.0.1:8000/v1/traces",
            headers={"Authorization": f"Bearer {os.environ['TOKEN']}"},
        )
    )
)
# Pydantic AI's own instrumentation (the GenAI conventions, which the dashboard reads).
Agent.instrument_all(InstrumentationSettings(tracer_provider=provider))

agent = Agent("openai:gpt-4o-mini", name="weather-bot", instructions="Answer briefly.")


@agent.tool_plain
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"It is sunny in {city}."


# conversation_id is the session the run goes in.
print(agent.run_sync("What is the weather in Lima?", conversation_id="ticket-4711").output)
provider.force_flush()  # a short script: send the spans before it exits
