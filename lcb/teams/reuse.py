"""Which masked runs of a team make only calls the whole team makes (hivemind's DAG-Shapley
reuses the whole team's answers for them: `lcb.agents.shared`).

Contract: `whole_team_answers(layout, active)` is True when every model call of the team
masked to `active` is a call the whole team makes on the same row with the same run seed: the
same agent, prompt, messages and request seed (`TeamContext.request_seed` depends on the
agent and the turn, never on the mask). Then, with a server that answers a request the same
way twice and tools that print the same output twice, the masked run needs no request. The
rule per team (what each team module says of its masks):
- every team: the whole team; a mask that leaves nobody to call (none active, or a centralized
  team without its manager: the team abstains);
- independent: every mask (replicas work apart; the vote reads only the active ones);
- decentralized: a single peer (it answers round 0 alone, as every peer does in the whole
  team's round 0);
- sequential: a prefix of the pipeline whose last stage writes a program in any case (a stage
  that does not gets the output contract only when it answers, so its prompt differs);
- centralized: nothing else (the manager's prompt lists exactly its active workers).
A False is always safe (the run just sends its requests); the tests check the rule against
real runs of every team at sizes 2 and 4.
"""

from __future__ import annotations

from collections.abc import Iterable

from lcb.teams.layouts import Layout, Topology


def whole_team_answers(layout: Layout, active: Iterable[str]) -> bool:
    """True when the whole team's run answers every call of the masked run (module doc)."""
    kept = layout.active(active)
    if len(kept) == len(layout.agents) or not kept:
        return True
    if layout.topology is Topology.INDEPENDENT:
        return True
    if layout.topology is Topology.DECENTRALIZED:
        return len(kept) == 1
    if layout.topology is Topology.SEQUENTIAL:
        return kept == layout.agents[:len(kept)] and kept[-1].role.writes_program
    if layout.topology is Topology.CENTRALIZED:
        return layout.agents[0] not in kept  # without its manager the team abstains
    return False
