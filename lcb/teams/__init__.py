"""Teams of agents: five topologies, run by `lcb.teams.solving.solve`.

The package's own import is empty, so its light modules (`setup`, `options`, `layouts`,
`formats`, `vote`) load without the model stack; `solving` (TEAMS, solve, solve_in) and
`common` (AgentSpec, TeamContext, TeamResult, TeamRuntime) bring LangChain and LangGraph.
"""
