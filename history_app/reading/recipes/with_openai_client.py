# pip install openai openinference-instrumentation-openai opentelemetry-sdk opentelemetry-exporter-otlp-proto-http
import os

from openai import OpenAI
from openinference.instrumentation import OITracer, TraceConfig, using_session
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
OpenAIInstrumentor().instrument(tracer_provider=provider)
tracer = OITracer(provider.get_tracer("weather-bot"), config=TraceConfig())
client = OpenAI()


@tracer.agent  # one run: the model calls inside it are its model calls
def weather_bot(question: str) -> str:
    answer = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": question}]
    )
    return answer.choices[0].message.content


with using_session("ticket-4711"):  # the session the run goes in
    print(weather_bot("What is the weather in Lima?"))
provider.force_flush()  # a short script: send the spans before it exits
