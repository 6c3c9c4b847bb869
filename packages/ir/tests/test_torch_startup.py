import subprocess
import sys
import textwrap


def test_meta_kernels_and_dispatch_modes_run_without_importing_dynamo():
    # a fresh process: this test process may have imported torch._dynamo already
    code = textwrap.dedent(
        """
        import sys, torch
        from torch.utils._python_dispatch import TorchDispatchMode
        from torchsmith.ir.torch_startup import defer_dynamo_import

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                return func(*args, **(kwargs or {}))

        assert defer_dynamo_import(Mode.__torch_dispatch__) > 100
        a = torch.empty(4, 8, device="meta")
        with Mode():
            out = torch.addmm(torch.empty(3, device="meta"), a, torch.empty(8, 3, device="meta"))
        assert out.shape == (4, 3) and torch.nn.functional.gelu(a).shape == (4, 8)
        assert "torch._dynamo" not in sys.modules
        import torch._dynamo  # once imported, torch's own wrapper takes over on the next call
        torch.addmm(torch.empty(3, device="meta"), a, torch.empty(8, 3, device="meta"))
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
