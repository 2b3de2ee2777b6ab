"""The fast order builder (planner/simulator/vblocks.py) gives the same slot lists as the straight port of seed 001's
zbv_greedy.py (sail-sg/zero-bubble-pipeline-parallelism @39f2c186) kept in tests/vblocks_ref.py, which re-scans a
device's memory for every candidate slot."""
import hashlib
import json

import pytest
import vblocks_ref as ref

from planner.simulator import vblocks


def _digest(slots) -> str:
    lists = [[list(x) for x in dev] for dev in slots]
    return hashlib.sha256(json.dumps(lists, separators=(",", ":")).encode()).hexdigest()


# SHA-256 of the slot lists tests/vblocks_ref.py builds (json, no spaces); m = 4p + 5 is the m = 2p + 8 build
# run through vblocks._extend, as _slots_cached does. Computed with the reference copy at commit 7d79c44.
PINNED = {
    ("v-min", 24, 24): "cff87b57ae0bf83a0b72ed083d3a9225f90031a2cd4533eb8c4c7c9781ba0a3e",
    ("v-min", 24, 48): "c126b5207879fe6d022b7eb3e96c9708df5851f0f803186ed387b4eca143c46f",
    ("v-min", 24, 56): "df69b818ca7a188d9137197c93bc906cad93d454c4234522693087b7ab335b05",
    ("v-min", 24, 101): "2d739ef1ede7ff4b93baa1115dd96239de37cee99cc36866adbe319a5afcf8d0",
    ("v-half", 24, 24): "47394cbe60a57d83008a70b82d1178a8c1323cf3713103b8bc9e6562d57b8460",
    ("v-half", 24, 48): "eeffa2950f91f878dcc87522f1d0f5d78db0729b012e29cd5ab437deefafcd3c",
    ("v-half", 24, 56): "67b449b8a0ea9abf69204ae2665340fdcaf46e853d1e1f2f902e25c1b3da3351",
    ("v-half", 24, 101): "c1c7a525b55dee05ff1a49ba869b7d85ae73a9229d6ed777aa1797157fa09d6b",
    ("v-min", 31, 31): "71b37f08a9ff4e9c47902c7175d68cca895b7fc22c1dd81fa1e119b52e6f7165",
    ("v-min", 31, 62): "dbae7c9217afee21821137e7a67ae56b70edff6743cb54a9e423dbaa86a420b1",
    ("v-min", 31, 70): "6dbb883ecbc024b200e6915465e7d4b5884b0ad2def00b6755e947124b280f59",
    ("v-min", 31, 129): "88d839c844253627452f2f942474bdc5e4e9c74888de0c3e677d42c6a3190558",
    ("v-half", 31, 31): "841a625bf28c6979d17535c78d953c6d595d10cea651841ee8736bdd5bba9be4",
    ("v-half", 31, 62): "7e8ff795a3149b4aa5f6bc19ebfb8f6f38796433c6af31054a0c2e656c09987a",
    ("v-half", 31, 70): "e7d6760bdaec04a8fa1da6f8c642c188847a99ca01424f5489ec6b2360df5d9a",
    ("v-half", 31, 129): "1f26b858ef409ca78c924734224e9fc804fc091cad739c37d23956e83759b8c9",
    ("v-min", 32, 32): "f3d524348327755caa599f8dadd4496b3bc95725b99a3ecb032c1939d7355450",
    ("v-min", 32, 64): "bb1554a325036f595bea06f4b2024f2bc79b1a1b6aaec64a410d553f6834e5dd",
    ("v-min", 32, 72): "9479904617206897a708bffd41570d48b7a8f3ad9c44798aa0e4f81a9a0b60b3",
    ("v-min", 32, 133): "db472a1ece1ddc9c035bc201c6cb42e20cd4366de44ec56470cae47266e0a267",
    ("v-half", 32, 32): "5f8c28f8713c82c05501165b18c7ed7d6728b7c2a3da4293cda7fcb78bbd8645",
    ("v-half", 32, 64): "5437abf19292b892e16916beb738a5eaf62f4545d0d6b6888577243110353880",
    ("v-half", 32, 72): "ca8c3885f436808afe6234cbf48a8fc915155a7fce652fbd2b74d73742b71423",
    ("v-half", 32, 133): "4792fa10084673d9d39f8b5127055e9c77fcb7d1aa3ddde921bf724114d66c65",
    ("v-min", 48, 48): "f5302edc23564d01486c5752bd89e43c2e8df14c0cb49e6d4098f7bc57b4fff8",
    ("v-min", 48, 96): "8f4c42078f134cd07c1fdcb4bdac6a7a1a9825dc5f74113eb462e8632979b8d8",
    ("v-min", 48, 104): "0e7795e0c594dd11d0ea6f30fed79ff53949250f994be61a434df8ca1ac264fc",
    ("v-min", 48, 197): "64cf469943ff6fd3be1286e648b1d8fbfae2d26c476b1bfe2917cabe11512304",
    ("v-half", 48, 48): "7825a9756b00cdb0d36ba558cea258cfaa9bd0b8bbe05b986973fa9a350fb7e4",
    ("v-half", 48, 96): "02938c077289e4137f68ac8ba3d775342c2c39e6ebe2b28e0107174ca165f0e2",
    ("v-half", 48, 104): "2a893081e4dc2d40309c5f65254fc318ec957fc77f8755177a6c50410d295205",
    ("v-half", 48, 197): "8bf9d0b846c6b93973a11bf882e6d273b8da406973a07c5cb0da7438c65fd9e9",
    ("v-min", 64, 64): "2e858b8df0015fbc4ef768141d4cd0e1dc1549581bb2e199cef55ec25b04980e",
    ("v-min", 64, 128): "8d43e8889942a7800973cc1ff27323d2336b0de819b368de93926b61d2878190",
    ("v-min", 64, 136): "880dfefb26832b07f5f0aef6b8dc8ecbfdf8f461b2777a389938db4524069058",
    ("v-min", 64, 261): "0ae2c6555e2df713a3f6f1f9d0efa467278dfce53cb6e831d88fcff2f1d32c54",
    ("v-half", 64, 64): "86b62723e973910e95e24f0272f853fd3bff23a89928c0fab67590046f22eda4",
    ("v-half", 64, 128): "ceed8f13045638c7da83661b4b42b2f7fde6c5800f52b1f067a9ebaae93014d9",
    ("v-half", 64, 136): "7d2fbe5502a0ab951a2808fadc2805e5ff15cf7a7abf42bc22ac6ff35e7bba84",
    ("v-half", 64, 261): "8225b81e4877a4fb352d6e9d41e072ef4a204281a8999851a3458a47ef36a495",
}


@pytest.mark.parametrize("name", ["v-min", "v-half"])
def test_equal_to_reference_small(name):
    for p in range(2, 17):
        for m in sorted({1, p, 2 * p, 2 * p + 8}):
            assert vblocks._slots(name, p, m) == ref._slots(name, p, m), (name, p, m)


@pytest.mark.parametrize("name", ["v-min", "v-half"])
def test_extended_equal_to_reference_full_build(name):
    """Past m = 2p + 8 the cache repeats the stable pattern; the reference built in full gives the same lists."""
    for p in (5, 8, 13):
        m = 4 * p + 5
        got = [[list(x) for x in dev] for dev in vblocks._slots_cached(name, p, m)]
        assert got == ref._slots(name, p, m), (name, p)


@pytest.mark.slow
@pytest.mark.parametrize("name,p,m", sorted(PINNED))
def test_equal_to_pinned_digests(name, p, m):
    slots = vblocks._slots_cached(name, p, m) if m > 2 * p + 8 else vblocks._slots(name, p, m)
    assert _digest(slots) == PINNED[(name, p, m)]


@pytest.mark.slow
@pytest.mark.parametrize("p", [24, 31])
def test_pins_are_the_reference(p):
    """The pins come from the reference copy (the cheaper part of the grid, rebuilt with it)."""
    for name in ("v-min", "v-half"):
        for m in (p, 2 * p, 2 * p + 8):
            assert _digest(ref._slots(name, p, m)) == PINNED[(name, p, m)], (name, p, m)
