"""The composition matrix on ResNet-20 (BatchNorm): every server algorithm with every anchor method,
the client rule cycling (tests/support/composition.py's check). In-process like the MLP and CNN
matrices of tests/unit/test_composition.py, but a minute or more of training in all: the suite's,
not the quick check's.
"""

from __future__ import annotations

import pytest

from tests.support.composition import RESNET_CASES, check_case
from tests.support.rounds import first_fast


@pytest.mark.parametrize("rule,anchor,server", first_fast(RESNET_CASES), ids=["-".join(c) for c in RESNET_CASES])
def test_resnet20_every_server_and_anchor(rule, anchor, server):
    check_case(rule, anchor, server, "resnet20")
