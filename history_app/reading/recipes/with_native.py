# pip install ./history_app/agent_history openai   (the library, from a checkout of this dashboard)
import os

from openai import OpenAI

from history_app.agent_history import AgentHistoryMiddleware, HttpSink

sink = HttpSink("http://127.0.0.1:8000/api/v1/ingest", os.environ["TOKEN"])
# session_id is the session the runs go in; the run's Markdown and JSON files go in folder.
history = AgentHistoryMiddleware(folder="Agent History", sinks=[sink], session_id="ticket-4711")
client = OpenAI()

question = "What is the weather in Lima?"
messages = [{"role": "user", "content": question}]
history.on_agent_start(question, agent=None)
history.on_iteration_start(1)
history.on_llm_start(messages)
answer = client.chat.completions.create(model="gpt-4o-mini", messages=messages)
history.on_llm_end(answer.choices[0].message.content, raw=answer)
history.on_agent_end(answer.choices[0].message.content)
print(answer.choices[0].message.content)
history.flush(timeout=10)  # a short script: send the run before it exits
sink.close(timeout=10)
