"""Agents' parts: the model endpoint and its one call wrapper, usage accounting, prompts and the
`python_exec` tool."""
