"""Row partitions and vocabulary shards: every row (token) exactly once, no empty slot, and each
kind is what its name says."""
import numpy as np
import pytest

from lossproof.conformance.distributed import partitions


@pytest.mark.parametrize("counts", [[3, 1, 1, 3, 2, 1, 2, 3], [5, 0, 4, 0, 2, 7, 1], [1] * 9, [4, 4, 4, 4]])
@pytest.mark.parametrize("ranks,micro", [(2, 2), (2, 1), (1, 3), (3, 2)])
def test_every_row_once_and_no_empty_slot(counts, ranks, micro):
    for kind, part in partitions.row_partitions(counts, ranks, micro).items():
        assert len(part) == ranks and all(len(mbs) == micro for mbs in part), kind
        rows = [i for mbs in part for mb in mbs for i in mb]
        assert sorted(rows) == list(range(len(counts))), kind
        assert all(len(mb) > 0 for mbs in part for mb in mbs), kind


def test_kinds_are_what_they_say():
    counts = np.array([3, 1, 1, 3, 2, 1, 2, 3])
    parts = partitions.row_partitions(counts, 2, 2)
    tokens = {k: [int(counts[list(mb)].sum()) for mbs in p for mb in mbs] for k, p in parts.items()}
    assert tokens["even"] == [4, 4, 4, 4]                      # balanced: rows and tokens
    assert max(tokens["uneven"]) - min(tokens["uneven"]) >= 3   # spread as far as the rows allow
    short = [sum(len(mb) for mb in mbs) for mbs in parts["short-rank"]]
    assert short[-1] < max(short[:-1])
    empty = partitions.row_partitions([5, 0, 4, 0, 2, 7, 1], 2, 2)["empty"]
    assert [0 in mb or 1 in mb for mbs in empty for mb in mbs].count(True) >= 1
    assert sorted(empty[0][-1]) == [1, 3]                      # rank 0's last micro-batch: the empty rows


def test_too_few_rows_and_duplicates_are_left_out():
    assert partitions.row_partitions([2, 2, 2], 2, 2) == {}
    assert set(partitions.row_partitions([4, 4, 4, 4], 2, 2)) == {"even"}   # uneven would repeat it


def test_vocab_shards():
    neg = np.full((2, 6), False)
    neg[1, [0, 2, 3]] = True
    shards = partitions.vocab_shards(list(neg), 6, 2)
    for split in shards.values():
        assert split[0][0] == 0 and split[-1][1] == 6 and all(a < b for a, b in split)
        assert all(split[i][1] == split[i + 1][0] for i in range(len(split) - 1))
    assert shards["even"] == ((0, 3), (3, 6)) and shards["uneven"][-1] == (5, 6)
    start, end = shards["neg-inf"][0]
    assert neg[1, start:end].all()
    three = partitions.vocab_shards(list(neg), 6, 3)["neg-inf"]
    assert len(three) == 3 and any(neg[1, a:b].all() for a, b in three)
    middle = np.full((1, 7), False)
    middle[0, 2:4] = True    # a run in the middle: two shards cannot isolate it, three can
    assert "neg-inf" not in partitions.vocab_shards(list(middle), 7, 2)
    assert (2, 4) in partitions.vocab_shards(list(middle), 7, 3)["neg-inf"]
    assert set(partitions.vocab_shards([np.zeros(6, bool)], 6, 3)) == {"even", "uneven"}   # nothing repeated


@pytest.mark.parametrize("text", ["2", "2x", "x2", "0x2", "2x0", "9x1", "2x2:bogus", " 2 x 2"])
def test_bad_partition_specs(text):
    with pytest.raises(ValueError):
        partitions.parse_partition(text)


def test_partition_specs():
    assert partitions.parse_partition("2x2") == (2, 2, None)
    assert partitions.parse_partition("4x1:short-rank") == (4, 1, "short-rank")
    assert partitions.parse_shards("3:neg-inf") == (3, "neg-inf")
    for bad in ("1", "x", "2:bogus", "9"):
        with pytest.raises(ValueError):
            partitions.parse_shards(bad)
