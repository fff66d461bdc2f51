"""Tree amounts are bounded: a number too large for the tree's int64 arithmetic is refused by
``validate`` with the path to the field (it once raised OverflowError from numpy instead)."""

from __future__ import annotations

import pytest

from gpuaware.quota import QuotaConfigError, validate
from gpuaware.quota.tree import MAX_AMOUNT


@pytest.mark.parametrize("field", ["gpus", "gpu_milli", "gpu_memory_mib", "cpu_milli", "memory_mib"])
@pytest.mark.parametrize("where", ["guaranteed", "limit"])
def test_an_amount_above_the_bound_is_refused_naming_the_field(field: str, where: str) -> None:
    with pytest.raises(QuotaConfigError) as err:
        validate(f'queues: [{{name: a1, {where}: {{"*": {{{field}: 4611686018427387904}}}}}}]')
    assert f"<= {MAX_AMOUNT}" in str(err.value) and f"$.queues[0].{where}" in str(err.value)
    assert str(err.value).endswith(f".{field}`")


def test_the_largest_amount_still_validates() -> None:
    tree = validate(f'queues: [{{name: a1, guaranteed: {{"*": {{gpus: {MAX_AMOUNT}}}}}}}]')
    assert int(tree.guaranteed("a1")[1]) == 1000 * MAX_AMOUNT
