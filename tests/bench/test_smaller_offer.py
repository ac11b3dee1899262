"""bench.smaller_offer at its own scale: both cases as described, and within its target."""

from bench import smaller_offer


def test_the_bench_prints_the_offers_cost_in_both_cases_within_the_target(capsys):
    assert smaller_offer.main(["--repeat", "5"]) == 0
    out = capsys.readouterr().out
    assert "1000 queued sessions over 8 templates of 4 courses on 16 full servers (128 cards)" in out
    assert "room left: 125 placed, 875 offered a smaller lab" in out
    assert "no room: 0 placed, 0 offered a smaller lab" in out
    assert out.count("pass with offers / without") == 2
