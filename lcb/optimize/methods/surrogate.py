"""`maspob`'s surrogate: a one-layer GATv2 over the team graph, in plain torch (CPU).

Contract:
- A combination (one pool variant per role) is a graph: one node per role of the team graph,
  its features the chosen variant's embedding followed by a one-hot of the role (the layer's
  weights are shared across nodes, so the one-hot tells roles apart). Attention runs over
  `adjacency(roles, edges)`: every edge in both directions (a parent shapes its child's
  input, the child's output is what the parent's work is judged by) plus self-loops. A
  shared-role team (independent, decentralized) is one node: its agents hold the same text.
- `GATv2Surrogate`: one GATv2 layer (Brody et al.: score a^T LeakyReLU(W_l x_j + W_r x_i),
  softmax over i's neighbours j, output sum_j alpha_ij W_l x_j + bias), ELU, mean over the
  nodes: the `features` (hidden wide) LinUCB works on; a linear head maps them to the
  predicted score.
- `fit(x, y, adj, ...)` trains a fresh model from a seeded generator (Adam, MSE, full batch,
  at most `epochs`, stopping after `patience` epochs without a lower training loss) and
  returns it with the best-loss weights and a `FitReport` (epochs run, loss, seconds). Torch
  runs single-threaded while fitting and predicting (`one_thread`), so the numbers do not
  depend on the machine's thread count; the previous setting is restored.
- torch is imported by this module: import it only after `maspob` checked that it is there.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

LEAKY_SLOPE = 0.2  # GATv2's LeakyReLU slope
DTYPE = torch.float64


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Torch on one thread inside the block (reduction order fixed), then as it was."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def adjacency(roles: Sequence[str], edges: Sequence[tuple[str, str]]) -> torch.Tensor:
    """The (N, N) attention mask: self-loops and every edge both ways (1 = may attend)."""
    index = {role: i for i, role in enumerate(roles)}
    adj = torch.eye(len(roles), dtype=DTYPE)
    for parent, child in edges:
        adj[index[parent], index[child]] = adj[index[child], index[parent]] = 1.0
    return adj


def node_features(embeddings: Sequence[torch.Tensor], combos: Sequence[Sequence[int]]
                  ) -> torch.Tensor:
    """(B, N, D + N) inputs: per role the chosen variant's embedding, then the role one-hot.
    `embeddings[r]` is role r's (pool size, D) matrix; `combos[b][r]` a variant index."""
    n = len(embeddings)
    eye = torch.eye(n, dtype=DTYPE)
    rows = [torch.stack([torch.cat([embeddings[r][combo[r]], eye[r]]) for r in range(n)])
            for combo in combos]
    return torch.stack(rows)


class GATv2Surrogate(torch.nn.Module):
    """One GATv2 layer, ELU, mean readout, linear head (module docstring)."""

    def __init__(self, in_dim: int, hidden: int, generator: torch.Generator) -> None:
        super().__init__()

        def uniform(*shape: int) -> torch.nn.Parameter:
            bound = math.sqrt(6.0 / (shape[0] + shape[-1]))  # Glorot, as GATv2 initialises
            return torch.nn.Parameter(
                torch.empty(*shape, dtype=DTYPE).uniform_(-bound, bound, generator=generator))

        self.w_left, self.w_right = uniform(in_dim, hidden), uniform(in_dim, hidden)
        self.attention = uniform(hidden, 1)
        self.bias = torch.nn.Parameter(torch.zeros(hidden, dtype=DTYPE))
        self.head = uniform(hidden, 1)
        self.head_bias = torch.nn.Parameter(torch.zeros(1, dtype=DTYPE))

    def features(self, x: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        """(B, hidden): the last layer's features of each combination."""
        left, right = x @ self.w_left, x @ self.w_right  # (B, N, H): sources j, targets i
        pair = right.unsqueeze(2) + left.unsqueeze(1)  # (B, i, j, H)
        scores = torch.nn.functional.leaky_relu(pair, LEAKY_SLOPE) @ self.attention
        scores = scores.squeeze(-1).masked_fill(adj == 0, float("-inf"))
        alpha = torch.softmax(scores, dim=-1)  # over the neighbours j of each i
        nodes = torch.nn.functional.elu(alpha @ left + self.bias)
        return nodes.mean(dim=1)

    def forward(self, x: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        return (self.features(x, adj) @ self.head).squeeze(-1) + self.head_bias


@dataclass(frozen=True)
class FitReport:
    """How one fit went: epochs run, the best training MSE, wall seconds."""

    epochs: int
    loss: float
    seconds: float

    def to_record(self) -> dict[str, float]:
        """Epochs and loss (deterministic); the seconds are kept apart (they are not)."""
        return {"epochs": self.epochs, "loss": round(self.loss, 9)}


def _snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: value.detach().clone() for name, value in model.state_dict().items()}


def fit(x: torch.Tensor, y: torch.Tensor, adj: torch.Tensor, *, hidden: int, lr: float,
        epochs: int, patience: int, seed: int) -> tuple[GATv2Surrogate, FitReport]:
    """A fresh surrogate fitted to scores `y` (B,) of combinations `x` (B, N, F)."""
    started = time.perf_counter()
    with one_thread():
        model = GATv2Surrogate(x.shape[-1], hidden, torch.Generator().manual_seed(seed))
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)
        best, best_state, waited, ran = math.inf, _snapshot(model), 0, 0
        for epoch in range(1, epochs + 1):
            ran = epoch
            optimizer.zero_grad()
            loss = torch.mean((model(x, adj) - y) ** 2)
            value = float(loss.detach())  # the loss of the weights before this step
            if value < best:
                best, best_state, waited = value, _snapshot(model), 0
            else:
                waited += 1
                if waited >= patience:
                    break
            loss.backward()
            optimizer.step()
        model.load_state_dict(best_state)
    return model, FitReport(epochs=ran, loss=best, seconds=time.perf_counter() - started)


def predict_features(model: GATv2Surrogate, x: torch.Tensor,
                     adj: torch.Tensor) -> list[list[float]]:
    """The features of combinations `x`, as plain floats (for LinUCB)."""
    with one_thread(), torch.no_grad():
        return model.features(x, adj).tolist()


def predict(model: GATv2Surrogate, x: torch.Tensor, adj: torch.Tensor) -> list[float]:
    """The surrogate's predicted scores of combinations `x`."""
    with one_thread(), torch.no_grad():
        return model(x, adj).tolist()
