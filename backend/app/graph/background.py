"""The graph's background tasks, as a worker runs them (app/tasks.py): each takes the task's
context first, reads the worker's own settings and writes its progress as it goes."""

from __future__ import annotations

from app.config import Config
from app.graph.runtime import GraphitiAdapter
from app.tasks import TaskContext


def delete_graph(task: TaskContext, graph_id: str) -> dict:
    return GraphitiAdapter(Config.from_env()).graph.delete(graph_id, progress=task.progress)


def add_episodes(task: TaskContext, graph_id: str, chunks: list[str], name: str) -> dict | None:
    """Ingest each chunk as one episode; a chunk that fails is recorded and the others go on."""
    graph = GraphitiAdapter(Config.from_env()).graph
    task.progress.update(chunks_done=0, chunks_total=len(chunks))
    done = []
    for index, chunk in enumerate(chunks, start=1):
        try:
            done.append(graph.add(graph_id, chunk, name=f"{name}-{index}"))
        except Exception as error:  # one bad chunk must not lose the others
            task.add_error(f"chunk {index}: {type(error).__name__}: {error}")
        task.progress["chunks_done"] = index
    return {"episodes": done} if done else None
