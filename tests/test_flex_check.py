"""The run-time check that decides whether flex_attention cells run on this CPU, and the logs it leaves."""

from __future__ import annotations

import torch

from kvconform.build import flex_check


def test_a_wrong_compiled_kernel_is_found_with_its_lengths(monkeypatch) -> None:
    """A compiled flex that is wrong at key length 8 only (as torch 2.13's avx2 kernel is) is reported with
    that length and its Δ; a right one passes. (The compiled flex is replaced: no kernel is built here.)"""
    from torch.nn.attention.flex_attention import flex_attention

    def wrong_at_8(q, k, v, **kwargs):
        out = flex_attention(q, k, v, **kwargs)
        return out + 2.0 if k.shape[2] == 8 else out

    monkeypatch.setattr(flex_check, "compiled_flex", lambda: wrong_at_8)
    reason = flex_check.flex_disagreement.__wrapped__(torch.float32)
    assert reason is not None and "disagrees with the math reference by Δ 2 in float32" in reason
    assert "wrong at key lengths 8)" in reason and f"vector ISA {flex_check.vector_isa()}" in reason
    monkeypatch.setattr(flex_check, "compiled_flex", lambda: flex_attention)
    assert flex_check.flex_disagreement.__wrapped__(torch.float32) is None


def test_a_compiler_that_refuses_flex_is_named(monkeypatch) -> None:
    def refuses(*args, **kwargs):
        raise NotImplementedError("torch.compile on current platform is not supported for CPU.")

    monkeypatch.setattr(flex_check, "compiled_flex", lambda: refuses)
    reason = flex_check.flex_disagreement.__wrapped__(torch.bfloat16)
    assert reason is not None and reason.endswith("does not compile: NotImplementedError: torch.compile on current "
                                                  "platform is not supported for CPU.")


def test_a_failing_compiled_test_reports_no_torch_trace_flood(pytester, monkeypatch) -> None:
    """pytest captures every non-propagating logger; torch's always-DEBUG trace logger must not fill a failure
    report (2,136 ``DEBUG torch.__trace`` lines in one flex cell's report before the plugin filtered them)."""
    pytester.makepyfile(test_compiled="""
        import torch
        from torch.nn.attention.flex_attention import flex_attention

        def test_fails_after_a_compile():
            q = torch.randn(1, 2, 4, 16)
            torch.compile(flex_attention, dynamic=True)(q, q, q)
            assert False, "planted"
    """)
    # A fresh inductor cache: torch 2.13's cache key ignores the vector ISA (kvconform.plugin.isolate_inductor_cache).
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(pytester.path / "inductor"))
    plain = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    pytester.makeconftest("""
        from kvconform.plugin import quiet_torch_trace

        def pytest_configure(config):
            quiet_torch_trace()  # what kvconform.plugin's pytest_configure does first
    """)
    quiet = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert (plain.ret, quiet.ret) == (1, 1)
    assert "planted" in quiet.stdout.str() and "1 failed" in quiet.stdout.str()
    assert "torch.__trace" in plain.stdout.str()  # the flood this plugin stops is there without it
    assert "torch.__trace" not in quiet.stdout.str()
