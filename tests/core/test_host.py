"""The host description (tecomp/host.py): vector width from features, cache sizes, the LLVM
feature string with the vector-width preference."""

from __future__ import annotations

import pytest

from tecomp import host as H

AVX512 = "+avx,+avx2,+fma,+avx512f,+avx512vl,+sse4.2"
AVX2 = "+avx,+avx2,+fma,-avx512f,+sse4.2"


def test_vector_width_follows_the_features():
    assert H.vector_bits_of(AVX512) == 512
    assert H.vector_bits_of(AVX512 + ",-evex512") == 256
    assert H.vector_bits_of(AVX2) == 256
    assert H.vector_bits_of("+sse2,+sse4.2,-avx") == 128


def test_llvm_features_switch_the_256_bit_preference():
    wide = H.from_features(AVX512)
    assert wide.vector_bits == 512 and wide.fma and wide.lanes(4) == 16
    assert H.llvm_features(wide).endswith("-prefer-256-bit")
    narrow = H.with_vector_bits(wide, 256)
    assert narrow.vector_bits == 256 and narrow.lanes(8) == 4
    assert H.llvm_features(narrow).endswith("+prefer-256-bit")
    avx2 = H.from_features(AVX2)
    assert "prefer-256-bit" not in H.llvm_features(avx2)
    assert H.with_vector_bits(avx2, 512).vector_bits == 256  # never wider than the CPU
    with pytest.raises(ValueError):
        H.with_vector_bits(avx2, 384)


def test_cache_sizes_and_this_machine():
    assert H.parse_size("48K") == 48 * 1024 and H.parse_size("300M") == 300 << 20
    assert H.parse_size("1024") == 1024
    host = H.describe()
    assert host.cores >= 1 and host.l1d > 0 and host.l2 >= host.l1d
    assert host.vector_bits == H.vector_bits_of(host.features)


def test_a_virtual_machine_counts_on_a_share_of_the_l3():
    mib = 1 << 20
    # bare metal: the L3 as reported, however large
    assert H.l3_share(480 * mib, 2 * mib, 2, virtual=False) == 480 * mib
    # a guest's two CPUs of a socket reported whole: L3_PER_L2 times each core's L2
    assert H.l3_share(480 * mib, 2 * mib, 2, virtual=True) == 2 * H.L3_PER_L2 * 2 * mib
    # a guest whose reported L3 is already smaller keeps it; no L3 stays none
    assert H.l3_share(8 * mib, 2 * mib, 2, virtual=True) == 8 * mib
    assert H.l3_share(0, 2 * mib, 2, virtual=True) == 0
    host = H.describe()
    reported = H.reported_caches()[2]
    assert host.l3 == H.l3_share(reported, host.l2, host.cores, H.under_hypervisor())
