"""A tecomp layer inside a PyTorch model, trained under ``torch.compile(fullgraph=True)``.

The layer is a "swish dense" block, ``y = z * sigmoid(z)`` with ``z = x W^T``, declared in
tecomp and registered with ``tc.interop.torch_function`` as the custom operator
``torch.ops.tecomp.swish_dense_<hash>``.  The rest of the model (a linear read-out, the loss)
is plain PyTorch.  ``torch.compile`` traces the whole loss without a graph break: tecomp's
operator is opaque to it (its fake implementation gives the output shape), and the backward
graph calls tecomp's gradient kernel.  The model learns a two-class problem on synthetic data.

    python examples/torch_layer.py                       # Inductor, as in training code
    python examples/torch_layer.py --backend aot_eager   # the same graphs, no C++ compile
"""

from __future__ import annotations

import argparse

import torch

import tecomp as tc

FEATURES, HIDDEN, CLASSES = 16, 32, 2


def program() -> tuple[list[tc.Tensor], list[tc.Tensor]]:
    """The layer's tensor program, ``([Y], [X, W])`` (``tecomp show`` reads this function)."""
    n = tc.var("n")
    X = tc.placeholder((n, FEATURES), name="X")
    W = tc.placeholder((HIDDEN, FEATURES), name="W")
    Z = tc.ops.dense(X, W)
    Y = tc.compute(Z.shape, lambda i, j: Z[i, j] * tc.sigmoid(Z[i, j]), name="swish_dense")
    return [Y], [X, W]


def swish_dense_layer() -> tc.interop.TorchKernel:
    (Y,), inputs = program()
    return tc.interop.torch_function(Y, inputs)


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = swish_dense_layer()
        self.weight = torch.nn.Parameter(torch.randn(HIDDEN, FEATURES) / FEATURES ** 0.5)
        self.head = torch.nn.Linear(HIDDEN, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.layer(x, self.weight))


def data(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(n, FEATURES, generator=gen)
    y = (x[:, 0] * x[:, 1] + x[:, 2] > 0).long()  # not linearly separable in x
    return x, y


def main(argv: list[str] | None = None) -> float:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="inductor")
    p.add_argument("--steps", type=int, default=60)
    args = p.parse_args(argv)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    model = Model()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    x, y = data(256, gen)

    def loss_fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(model(x), y)

    loss_c = torch.compile(loss_fn, fullgraph=True, backend=args.backend)
    first = None
    for step in range(args.steps):
        opt.zero_grad()
        loss = loss_c(x, y)
        loss.backward()
        opt.step()
        first = loss.item() if first is None else first
        if step % 20 == 0 or step == args.steps - 1:
            print(f"step {step:3d}  loss {loss.item():.4f}")
    with torch.no_grad():
        acc = (model(x).argmax(1) == y).float().mean().item()
    print(f"torch.compile(backend={args.backend!r}, fullgraph=True): loss {first:.4f} -> "
          f"{loss.item():.4f}, train accuracy {acc:.2f}")
    return loss.item()


if __name__ == "__main__":
    main()
