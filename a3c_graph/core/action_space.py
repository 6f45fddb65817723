"""What a policy chooses: one of n actions, or a vector of n reals within bounds.

Read by code that must not load TensorFlow (the launcher's estimate, network_spec.py);
distributions.py gives each kind its distribution.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ActionSpace:
    """One of `n` actions (low and high None), or a vector of `n` reals in [low, high]."""

    n: int
    low: tuple[float, ...] | None = None
    high: tuple[float, ...] | None = None

    @property
    def continuous(self) -> bool:
        return self.low is not None

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of one action: () for a discrete action, (n,) for a Box's."""
        return (self.n,) if self.continuous else ()

    @property
    def dtype(self) -> str:
        """The NumPy dtype name of an action."""
        return "float32" if self.continuous else "int32"

    @property
    def policy_size(self) -> int:
        """P: the width of the policy's output (the distribution's parameters)."""
        return 2 * self.n if self.continuous else self.n


def as_action_space(actions) -> ActionSpace:
    """An ActionSpace as it is, an int as that many discrete actions."""
    return actions if isinstance(actions, ActionSpace) else ActionSpace(int(actions))
