"""The task format: read Terminal-Bench 1.0 and 2.0 / Harbor tasks, write 2.0.

>>> from ale.task import load_task, write_task_tb2
>>> task = load_task("datasets/examples/hello-tb1")       # doctest: +SKIP
>>> write_task_tb2(task, "/tmp/hello-tb1-as-2.0")          # doctest: +SKIP
"""

from ale.task.errors import TaskError, TaskExistsError, TaskFormatError, TaskWriteError
from ale.task.loader import detect_format, iter_tasks, load_task, load_tasks
from ale.task.models import (
    TB1_AGENT_TIMEOUT_SEC,
    TB1_TEST_TIMEOUT_SEC,
    TB2_AGENT_TIMEOUT_SEC,
    TB2_EXTRA_KEY,
    TB2_VERIFIER_TIMEOUT_SEC,
    CollectHook,
    Healthcheck,
    Task,
    TaskArtifact,
    TaskEnvironment,
    TaskMcpServer,
    TaskMetadata,
    TaskStep,
    TaskVerifier,
)
from ale.task.tb1 import load_tb1
from ale.task.tb2 import agent_instruction, load_tb2
from ale.task.writer import write_task_tb2

__all__ = [
    "TB1_AGENT_TIMEOUT_SEC",
    "TB1_TEST_TIMEOUT_SEC",
    "TB2_AGENT_TIMEOUT_SEC",
    "TB2_EXTRA_KEY",
    "TB2_VERIFIER_TIMEOUT_SEC",
    "CollectHook",
    "Healthcheck",
    "Task",
    "TaskArtifact",
    "TaskEnvironment",
    "TaskError",
    "TaskExistsError",
    "TaskFormatError",
    "TaskMcpServer",
    "TaskMetadata",
    "TaskStep",
    "TaskVerifier",
    "TaskWriteError",
    "agent_instruction",
    "detect_format",
    "iter_tasks",
    "load_task",
    "load_tasks",
    "load_tb1",
    "load_tb2",
    "write_task_tb2",
]
