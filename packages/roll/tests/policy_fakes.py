"""Stand-ins at the generation-backend seam, shared by the in-process and gateway tests."""

from __future__ import annotations

from typing import Any

from roll.generation.base import Generation, SamplingParams


class ScriptedBackend:
    """A generation backend at its seam: replies with scripted texts, chosen by the prompt's
    episode marker, and records every batch it was given."""

    name = "scripted"

    def __init__(self, tokenizer: Any, scripts: dict[str, list[str]], *, cut: int | None = None):
        self.tokenizer = tokenizer
        self.scripts = {k: list(v) for k, v in scripts.items()}
        self.policy_version = 3
        self.batches: list[int] = []
        self.cut = cut

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        self.batches.append(len(prompts))
        out = []
        for prompt in prompts:
            text = self.tokenizer.decode(prompt)
            key = next(k for k in self.scripts if f"episode {k}" in text)
            reply = self.scripts[key].pop(0)
            ids = self.tokenizer.encode(reply, add_special_tokens=False)
            ids.append(self.tokenizer.eos_token_id)
            reason = "stop"
            if self.cut is not None and len(ids) > self.cut:
                ids, reason = ids[: self.cut], "length"
            out.append(Generation(token_ids=ids, logprobs=[-0.25] * len(ids), finish_reason=reason))
        return out

    def sync_weights(self, model: Any, version: int) -> None:
        self.policy_version = version

    def close(self) -> None:
        pass


def tool_call(name: str, args: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


SCRIPT = [
    "Let me look." + "\n" + tool_call("run_shell_command", '{"command": "ls"}'),
    tool_call("write_file", '{"path": "out.txt", "content": "done\\n"}'),
    tool_call("finish", '{"summary": "wrote out.txt"}'),
]


class SilentAgent:
    """An agent (``policy_fakes:SilentAgent``) that never calls its model."""

    name = "silent"

    def __init__(self, **_: Any) -> None:
        pass

    async def run(self, instruction: str, sandbox: Any, **_: Any) -> Any:
        from ale.trajectory import AgentInfo, Trajectory

        return Trajectory(agent=AgentInfo(name=self.name))


class CrashingAgent:
    """An agent (``policy_fakes:CrashingAgent``) that calls the gateway once, then crashes."""

    name = "crashing"

    def __init__(self, *, base_url: str, api_key: str, **_: Any) -> None:
        self.base_url, self.api_key = base_url, api_key

    async def run(self, instruction: str, sandbox: Any, **_: Any) -> Any:
        import openai

        async with openai.AsyncOpenAI(base_url=self.base_url, api_key=self.api_key) as client:
            await client.chat.completions.create(
                model="policy", messages=[{"role": "user", "content": instruction}]
            )
        raise RuntimeError("the agent fell over after its first call")
