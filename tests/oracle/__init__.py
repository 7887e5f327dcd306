"""Oracles: the straightforward versions of what the operator does fast, kept to prove the fast ones exact."""
