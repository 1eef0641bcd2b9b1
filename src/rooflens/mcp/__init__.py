"""``rooflens mcp``: the verbs as tools of a Model Context Protocol server over stdio, for agents.

The server (:mod:`.server`) is plumbing: tool calls run in child processes (:mod:`.child`) that call
the same pipeline as the command line (:mod:`.tools`) and hand back JSON, which :mod:`.summary` cuts
to a size an agent's context can hold. docs/agents.md is the guide.
"""
