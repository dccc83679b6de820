"""Shared helpers for the state tests."""

from __future__ import annotations

from collections.abc import Callable

from state_store.core.keygroups import KeyGroupRange, key_group_of, key_group_range_for_subtask
from state_store.core.state import KeyedStateBackend

MAX_P = 128


class Average:
    """An AggregateFunction computing the mean; its accumulator is a JSON-able [total, count]."""

    def create_accumulator(self) -> list[float]:
        return [0.0, 0]

    def add(self, value: float, accumulator: list[float]) -> list[float]:
        return [accumulator[0] + value, accumulator[1] + 1]

    def get_result(self, accumulator: list[float]) -> float:
        return accumulator[0] / accumulator[1]

    def merge(self, a: list[float], b: list[float]) -> list[float]:
        return [a[0] + b[0], a[1] + b[1]]


def full_backend(now_ms: Callable[[], int] | None = None) -> KeyedStateBackend:
    return KeyedStateBackend(KeyGroupRange(0, MAX_P - 1), MAX_P, now_ms=now_ms)


def subtask_backends(parallelism: int) -> list[KeyedStateBackend]:
    ranges = [key_group_range_for_subtask(MAX_P, parallelism, i) for i in range(parallelism)]
    return [KeyedStateBackend(rng, MAX_P) for rng in ranges]


def owner(backends: list[KeyedStateBackend], key: object) -> KeyedStateBackend:
    kg = key_group_of(key, MAX_P)
    (found,) = [b for b in backends if kg in b.key_groups]
    return found
