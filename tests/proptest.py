"""Hypothesis profiles for gpumix's property tests, and each test's example budget.

- ``ci`` (the default when ``$CI`` is set, as ``.ci/run`` sets it): derandomised, so the examples
  a run checks depend only on the code, the pinned Hypothesis (``constraints.txt``) and the test;
  no deadline (a loaded 2-core machine can take seconds on an example an idle one runs in 50 ms);
  no example database, so nothing a previous run left behind changes what is checked.
- ``dev`` (the default otherwise): random search, no deadline, failures kept in the database.
- ``search`` (``make property-search``): random search with 20 times each test's budget.

``pytest --hypothesis-profile NAME`` picks another one. A test that sets its own number of
examples asks for ``budget(n)``: ``n`` under ``ci`` and ``dev``, 20 n under ``search``.
"""

from __future__ import annotations

import os

from hypothesis import settings

DEFAULT_EXAMPLES = 100
"""Hypothesis's own default ``max_examples``: the unit a profile scales budgets by."""

# Explicit on every profile: a profile's unset values come from the one in force when it is
# registered, which under $CI is Hypothesis's own derandomised "ci" profile.
settings.register_profile("ci", derandomize=True, deadline=None, database=None, print_blob=True)
settings.register_profile("dev", derandomize=False, deadline=None, print_blob=True)
settings.register_profile(
    "search",
    derandomize=False,
    deadline=None,
    print_blob=True,
    max_examples=20 * DEFAULT_EXAMPLES,
)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


def budget(examples: int) -> settings:
    """``examples`` examples, scaled by the profile in force when the test module is imported."""
    scale = settings.default.max_examples / DEFAULT_EXAMPLES
    return settings(max_examples=max(1, round(examples * scale)))
