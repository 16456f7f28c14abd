# pip install smolagents openai openinference-instrumentation-smolagents openinference-instrumentation-openai opentelemetry-sdk opentelemetry-exporter-otlp-proto-http
import os

from openinference.instrumentation import using_session
from openinference.instrumentation.openai import OpenAIInstrumentor
from openinference.instrumentation.smolagents import SmolagentsInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from smolagents import OpenAIServerModel, ToolCallingAgent, tool

provider = TracerProvider()
provider.add_span_processor(
    BatchSpanProcessor(
        OTLPSpanExporter(
            endpoint="http://127.0.0.1:8000/v1/traces",
            headers={"Authorization": f"Bearer {os.environ['TOKEN']}"},
        )
    )
)
SmolagentsInstrumentor().instrument(tracer_provider=provider)
# The OpenAI client's instrumentation beside it keeps each model call's messages as sent.
OpenAIInstrumentor().instrument(tracer_provider=provider)


@tool
def get_weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: The city.
    """
    return f"It is sunny in {city}."


agent = ToolCallingAgent(tools=[get_weather], model=OpenAIServerModel(model_id="gpt-4o-mini"), max_steps=4)
with using_session("ticket-4711"):  # the session the run goes in
    print(agent.run("What is the weather in Lima?"))
provider.force_flush()  # a short script: send the spans before it exits
