"""Every example of the spec (tracing-optimization.md), with only the imports and device=
changed, printing what each gives. Run by `make demo`."""

import lazytrace as torch  # the spec's examples are written against torch's names
import lazytrace as torch_xla
import lazytrace.metrics as met
from lazytrace import nn
from lazytrace.experimental.assume_pure import assume_pure
from lazytrace.experimental.scan import scan
from lazytrace.experimental.scan_layers import scan_layers
from lazytrace.func import functional_call
from lazytrace import while_loop


def assume_pure_with_functions():
    calls = 0

    @assume_pure
    def do_math(a, b, c=42):
        nonlocal calls
        calls += 1
        return a @ b + c

    x, y = torch.randn(4, 4, device="cpu"), torch.randn(4, 4, device="cpu")
    # Traced once, cached for all subsequent calls with same shapes
    for i in range(1000):
        result = do_math(x, y)
    torch_xla.sync()
    print(f"assume_pure: do_math called 1000 times, traced {calls} time(s); result[0, 0] = "
          f"{result[0, 0].item():.4f}")


def assume_pure_with_module():
    traces = 0

    class MyModule(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(10, 10)

        def forward(self, x):
            nonlocal traces
            traces += 1
            return self.linear(x)

    module = MyModule().to("cpu")

    # Convert module forward to pure function
    pure_forward = lambda params, buffers, x: functional_call(module, (params, buffers), (x,))  # noqa: E731
    cached_forward = assume_pure(pure_forward)

    params = dict(module.named_parameters())
    buffers = dict(module.named_buffers())
    for i in range(1000):
        x = torch.randn(5, 10, device="cpu")
        y = cached_forward(params, buffers, x)
    torch_xla.sync()
    print(f"assume_pure + functional_call: 1000 calls, forward traced {traces} time(s); "
          f"y.shape = {tuple(y.shape)}")


def scan_layers_decoder():
    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 16)

        def forward(self, h):
            return h + torch.tanh(self.fc(h))

    class Decoder(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.layers = nn.ModuleList([Layer() for _ in range(n)])

        # Before: unrolled loop
        def run_decoder_layers_loop(self, hidden_states):
            for layer in self.layers:
                hidden_states = layer(hidden_states)
            return hidden_states

        # After: scan_layers -> single compilation
        def run_decoder_layers(self, hidden_states):
            return scan_layers(self.layers, hidden_states, is_layer_pure=True)

    model = Decoder(8)
    h = torch.randn(2, 16)
    a, b = model.run_decoder_layers_loop(h), model.run_decoder_layers(h)
    print(f"scan_layers: 8 layers, largest difference from the for loop "
          f"{(a - b).abs().max().item():.2e}")


def scan_cumsum():
    def cumsum(accumulated, element):
        accumulated += element
        return accumulated, accumulated

    init = torch.tensor([0.0], device="cpu")
    xs = torch.tensor([1.0, 2.0, 3.0], device="cpu")
    torch_xla.sync()

    final, result = scan(cumsum, init, xs)
    print(f"scan cumsum: final {final}, result {result.tolist()}")


def scan_pytree():
    carry = {
        "sum": torch.tensor([0.0], device="cpu"),
        "count": torch.tensor([0.0], device="cpu"),
    }
    xs = {"values": torch.arange(1, 6, dtype=torch.float32, device="cpu")}

    def fn(carry_dict, x_dict):
        new_sum = carry_dict["sum"] + x_dict["values"]
        new_count = carry_dict["count"] + 1.0
        new_carry = {"sum": new_sum, "count": new_count}
        running_mean = new_sum / new_count
        return new_carry, running_mean

    final_carry, means = scan(fn, carry, xs)
    print(f"scan pytree: sum {final_carry['sum'].item()}, count {final_carry['count'].item()}, "
          f"running means {[round(v, 4) for v in means.reshape(-1).tolist()]}")


def while_loop_example():
    def cond_fn(iteri, x):
        return iteri > 0

    def body_fn(iteri, x):
        return iteri - 1, torch.add(x, 1)

    init_val = torch.tensor(3, device="cpu")
    iteri = torch.tensor(10, device="cpu")
    _, res = while_loop(cond_fn, body_fn, (iteri, init_val))
    print("while_loop: res =", res)  # (an f-string formats a 0-d tensor as its number, as torch)


def compile_step():
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, target = torch.randn(16, 8), torch.randn(16, 1)

    @torch.compile(name="train_step")
    def train_step(x, target):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), target)
        loss.backward()
        opt.step()
        return loss

    losses = [train_step(x, target).item() for _ in range(5)]
    print(f"compile: 5 steps, loss {losses[0]:.4f} -> {losses[-1]:.4f}, compiled "
          f"{met.counter_value('CompileCount[train_step]')} time(s)")


if __name__ == "__main__":
    assume_pure_with_functions()
    assume_pure_with_module()
    scan_layers_decoder()
    scan_cumsum()
    scan_pytree()
    while_loop_example()
    compile_step()
