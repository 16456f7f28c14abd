# pip install langchain langchain-openai openinference-instrumentation-langchain opentelemetry-sdk opentelemetry-exporter-otlp-proto-http
import os

from langchain.agents import create_agent
from langchain.tools import tool
from openinference.instrumentation.langchain import LangChainInstrumentor
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
LangChainInstrumentor().instrument(tracer_provider=provider)


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"It is sunny in {city}."


# A LangGraph graph: LangChain's agent is one (a StateGraph of your own is instrumented alike).
agent = create_agent("openai:gpt-4o-mini", tools=[get_weather], system_prompt="Answer briefly.")
# The thread_id is the session the run goes in (LangChain alone: metadata={"session_id": ...}).
config = {"configurable": {"thread_id": "ticket-4711"}}
state = agent.invoke({"messages": [{"role": "user", "content": "What is the weather in Lima?"}]}, config)
print(state["messages"][-1].content)
provider.force_flush()  # a short script: send the spans before it exits
