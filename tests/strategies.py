"""Hypothesis strategies shared by the test modules."""

from hypothesis import strategies as st

PAGE_SIZES = (1, 2, 4, 16)

page_sizes = st.sampled_from(PAGE_SIZES)
small_page_sizes = st.sampled_from((1, 2, 4))


def token_keys(max_len: int = 16, alphabet: int = 3) -> st.SearchStrategy[list[int]]:
    """Short token lists over a tiny alphabet, so that prefixes collide often."""
    return st.lists(st.integers(0, alphabet - 1), max_size=max_len)


def prompts(max_len: int = 24, alphabet: int = 3) -> st.SearchStrategy[list[int]]:
    """Non-empty prompts over a tiny alphabet (shared prefixes are common)."""
    return st.lists(st.integers(0, alphabet - 1), min_size=1, max_size=max_len)
