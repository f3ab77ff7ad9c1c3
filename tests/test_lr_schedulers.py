"""Every LR scheduler's rate at chosen updates, against values worked out by hand from its formula
(peak 1e-3 unless said otherwise)."""

import pytest

import seqkit
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import LR_SCHEDULERS

seqkit.import_builtin_components()


def schedule(name, max_update=0, peak=1e-3, **fields):
    return LR_SCHEDULERS.build(LR_SCHEDULERS.make_config({"name": name, **fields}), peak, max_update)


# (scheduler, its fields, max_update, {update: rate})
CASES = [
    # warmup from 0 over 4 updates, then peak * sqrt(4 / n)
    ("inverse_sqrt", {"warmup_updates": 4, "warmup_init_lr": 0.0}, 0,
     {0: 0.0, 1: 2.5e-4, 2: 5e-4, 4: 1e-3, 16: 5e-4, 64: 2.5e-4, 400: 1e-4}),
    # warmup from 1e-7: 1e-7 + (1e-3 - 1e-7) * n / 4
    ("inverse_sqrt", {"warmup_updates": 4}, 0, {0: 1e-7, 2: 5.0005e-4}),
    # warmup 2, half a cosine over 8 updates down to 1e-4, then 1e-4
    ("cosine", {"warmup_updates": 2, "min_lr": 1e-4, "period_updates": 8}, 0,
     {0: 0.0, 1: 5e-4, 2: 1e-3, 6: 5.5e-4, 10: 1e-4, 50: 1e-4}),
    # no period: the cosine spans max_update - warmup = 10
    ("cosine", {}, 10, {0: 1e-3, 5: 5e-4, 10: 0.0}),
    # warmup 2, then (1e-3 - 0) * (1 - (n - 2) / 8) ** 2
    ("polynomial_decay", {"warmup_updates": 2, "power": 2.0, "total_num_update": 10}, 0,
     {1: 5e-4, 2: 1e-3, 6: 2.5e-4, 8: 6.25e-5, 10: 0.0, 11: 0.0}),
    # linear decay to 1e-4 over max_update
    ("polynomial_decay", {"end_learning_rate": 1e-4}, 10, {0: 1e-3, 5: 5.5e-4, 10: 1e-4}),
    ("fixed", {"warmup_updates": 4}, 0, {0: 0.0, 1: 2.5e-4, 4: 1e-3, 1000: 1e-3}),
    # ULMFiT: 100 updates, cut at 10; peak / 32 at both ends
    ("slanted_triangular", {}, 100,
     {0: 3.125e-5, 5: 5.15625e-4, 10: 1e-3, 55: 5.15625e-4, 100: 3.125e-5, 150: 3.125e-5}),
    ("slanted_triangular", {"cut_frac": 0.5, "ratio": 2.0, "total_num_update": 8}, 0,
     {0: 5e-4, 2: 7.5e-4, 4: 1e-3, 6: 7.5e-4, 8: 5e-4}),
]


@pytest.mark.parametrize("name,fields,max_update,expected", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_rates_at_chosen_updates(name, fields, max_update, expected):
    s = schedule(name, max_update, **fields)
    for n, rate in expected.items():
        assert s.lr_at(n) == pytest.approx(rate, rel=1e-9, abs=1e-15), f"{name} at update {n}"


def test_schedules_that_need_a_length_say_so():
    for name in ("cosine", "polynomial_decay", "slanted_triangular"):
        with pytest.raises(SeqkitError, match=f"lr_scheduler={name} needs"):
            schedule(name, 0)


def test_slanted_triangular_ranges_are_checked():
    with pytest.raises(SeqkitError, match="cut_frac"):
        LR_SCHEDULERS.make_config({"name": "slanted_triangular", "cut_frac": 1.0})
    with pytest.raises(SeqkitError, match="ratio"):
        LR_SCHEDULERS.make_config({"name": "slanted_triangular", "ratio": 0.5})
