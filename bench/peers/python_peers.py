"""lazytrace beside the peers a user would pick today, on one machine: PyTorch 2 eager and
torch.compile (inductor), JAX's jax.jit with the layers as a Python loop and as lax.scan
(optax AdamW), and torch_xla on its CPU device with the spec's own tools (plain tracing,
assume_pure per layer, scan_layers). The same decoder (lazytrace's: pre-norm, grouped-query
attention with rotary positions, SiLU-gated MLP), the same weights and tokens; each peer's
logits must agree with lazytrace's within 1e-4. Per size: forward and AdamW training step;
compile time (the step's first call less a cached one) and the tools' own measure of it
(lazytrace's and torch_xla's CompileTime, TorchDynamo's compile_inner, XLA's compile of the
step lowered by JAX afresh); and the time a cached step spends tracing where it is traced
again (lazytrace's TraceTime; torch_xla: the step recorded, before its sync; a jit traces
only at its first call).

Each library runs in a process of its own (torch_xla's in its own environment), which
builds its models, makes their first calls, then waits. The rows are timed in rounds, one
row after another in a rotating order, each turn starting with an untimed call: a slow
minute of the machine falls on every row alike, and no library's threads are about while
another's row is timed. The times are medians over all rounds.

Usage: python_peers.py [--sizes spec-10,spec-100,compute] [--reps N] [--rounds R]
                       [--peers torch,jax,xla]
(make bench-peers runs it; scripts/install-deps.sh --peers installs the peers into .venv-peers
and torch_xla into .venv-xla)
"""

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

from dataclasses import asdict, dataclass

import numpy as np


@dataclass
class Config:  # lazytrace's DecoderConfig again: the torch_xla worker's environment has no lazytrace
    vocab: int = 256
    hidden: int = 128
    intermediate: int = 1024
    heads: int = 4
    kv_heads: int = 2
    layers: int = 10
    max_seq: int = 8
    rope_theta: float = 10000.0
    norm_eps: float = 1e-6

    @property
    def head_dim(self):
        return self.hidden // self.heads

SIZES = {
    # name: (config, batch, seq, reps)
    "spec-10": (dict(hidden=128, intermediate=1024, heads=4, kv_heads=2, layers=10, max_seq=8), 2, 8, 20),
    "spec-100": (dict(hidden=128, intermediate=1024, heads=4, kv_heads=2, layers=100, max_seq=8), 2, 8, 10),
    "compute": (dict(hidden=512, intermediate=2048, heads=8, kv_heads=4, layers=4, max_seq=256), 2, 256, 20),
}
LR, WD, EPS = 1e-3, 0.01, 1e-8
PROTOCOL = "@@ "  # a worker's lines to the parent start with this; anything else is the libraries'


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def first_call(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


@dataclass
class Peer:
    """A row in a worker: its forward and step, the step's first call (trace and compile),
    its logits' largest difference from lazytrace's, the tool's own measure of the first
    step's compile (s; None where it has none), and the seconds each call of the step spent
    tracing, where a cached step is traced again (lazytrace, torch_xla; None elsewhere)."""
    name: str
    forward: object
    step: object
    step_first: float
    diff: float
    compiles: bool = True
    own_compile: float = None
    traced: list = None


@dataclass
class Case:
    cfg: Config
    weights: dict
    tokens: np.ndarray
    targets: np.ndarray
    ref: np.ndarray


def save_case(path, case):
    np.savez(path, cfg=json.dumps(asdict(case.cfg)), tokens=case.tokens, targets=case.targets,
             ref=case.ref, **{"w:" + k: v for k, v in case.weights.items()})


def load_case(path):
    d = np.load(path, allow_pickle=False)
    return Case(Config(**json.loads(str(d["cfg"]))), {k[2:]: d[k] for k in d.files if k.startswith("w:")},
                d["tokens"], d["targets"], d["ref"])


# ---- lazytrace


def lazytrace_peers(case):
    import lazytrace as lt
    from lazytrace.models import Decoder, DecoderConfig
    from lazytrace.nn import functional as F

    cfg = case.cfg
    tok, tgt = lt.tensor(case.tokens), lt.tensor(case.targets.reshape(-1))

    def timer_ns(name):  # lazytrace's own timers (torch_xla's names)
        data = lt.metrics.metric_data(name)
        return data[1] if data else 0

    def peer(name, mode, stacked):
        lt.manual_seed(0)  # the weights the parent made, the same seed
        model = Decoder(DecoderConfig(**asdict(cfg)), layers_mode=mode, stacked=stacked)
        lt.sync()
        opt = lt.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD, eps=EPS)

        def forward():
            with lt.no_grad():
                y = model(tok)
                lt.sync([y])
            return y

        traced = []

        def step():
            t0 = timer_ns("TraceTime")
            loss = F.cross_entropy(model(tok).reshape(-1, cfg.vocab), tgt)
            loss.backward()
            opt.step()
            opt.zero_grad()
            lt.sync()
            traced.append((timer_ns("TraceTime") - t0) * 1e-9)

        diff = float(np.abs(forward().numpy() - case.ref).max())
        c0 = timer_ns("CompileTime")
        first = first_call(step)
        traced.clear()
        return Peer(name, forward, step, first, diff, own_compile=(timer_ns("CompileTime") - c0) * 1e-9,
                    traced=traced)

    return [peer("lazytrace, layers as a loop", "loop", False),
            peer("lazytrace, scan_layers (stacked)", "scan", True)]


# ---- PyTorch (also on torch_xla's device)


def torch_decoder(torch, cfg, weights):
    """The decoder as torch modules (a ModuleList of layers, as scan_layers takes), with
    lazytrace's weights."""
    nn, fn = torch.nn, torch.nn.functional

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(cfg.hidden))

        def forward(self, x):
            return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + cfg.norm_eps) * self.weight

    def linear(i, o):
        return nn.Linear(i, o, bias=False)

    def rotary(x):
        t, dim = x.shape[-2], x.shape[-1]
        half = dim // 2
        inv = torch.exp(torch.arange(half, dtype=torch.float32, device=x.device) *
                        (-2 * math.log(cfg.rope_theta) / dim))
        ang = torch.arange(t, dtype=torch.float32, device=x.device)[:, None] * inv[None, :]
        ang = torch.cat([ang, ang], -1)
        rot = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * torch.cos(ang) + rot * torch.sin(ang)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            kv = cfg.kv_heads * cfg.head_dim
            self.q_proj, self.k_proj = linear(cfg.hidden, cfg.hidden), linear(cfg.hidden, kv)
            self.v_proj, self.o_proj = linear(cfg.hidden, kv), linear(cfg.hidden, cfg.hidden)

        def forward(self, x):
            b, t, _ = x.shape
            hd, rep = cfg.head_dim, cfg.heads // cfg.kv_heads

            def heads(y, n):
                return y.view(b, t, n, hd).permute(0, 2, 1, 3)

            q = rotary(heads(self.q_proj(x), cfg.heads))
            k = rotary(heads(self.k_proj(x), cfg.kv_heads)).repeat_interleave(rep, 1)
            v = heads(self.v_proj(x), cfg.kv_heads).repeat_interleave(rep, 1)
            s = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
            causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            s = s.masked_fill(~causal, float("-inf"))
            out = (torch.softmax(s, -1) @ v).permute(0, 2, 1, 3).reshape(b, t, cfg.hidden)
            return self.o_proj(out)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj = linear(cfg.hidden, cfg.intermediate)
            self.up_proj = linear(cfg.hidden, cfg.intermediate)
            self.down_proj = linear(cfg.intermediate, cfg.hidden)

        def forward(self, x):
            return self.down_proj(fn.silu(self.gate_proj(x)) * self.up_proj(x))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn_norm, self.attn, self.mlp_norm, self.mlp = RMSNorm(), Attention(), RMSNorm(), MLP()

        def forward(self, h):
            h = h + self.attn(self.attn_norm(h))
            return h + self.mlp(self.mlp_norm(h))

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
            self.layers = nn.ModuleList(Layer() for _ in range(cfg.layers))
            self.norm = RMSNorm()
            self.head = linear(cfg.hidden, cfg.vocab)
            self.run_layers = None  # (layers, h) -> h; None: a loop

        def forward(self, tok):
            h = self.embed(tok)
            if self.run_layers:
                h = self.run_layers(self.layers, h)
            else:
                for layer in self.layers:
                    h = layer(h)
            return self.head(self.norm(h))

    model = Decoder()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(weights[name]))
    return model


def torch_peers(case):
    # a fresh inductor cache: its compile time is a first compile's, not a disk cache's
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-")
    import torch

    torch.set_num_threads(os.cpu_count())
    cfg = case.cfg
    tok = torch.from_numpy(case.tokens)
    tgt = torch.from_numpy(case.targets.reshape(-1))

    def dynamo_compile_s():  # TorchDynamo's own compile times, all frames so far
        import torch._dynamo.utils as du

        names, values = du.compile_times(repr="csv", aggregate=True)
        return float(values[names.index("_compile.compile_inner")]) if "_compile.compile_inner" in names else 0.0

    def peer(name, compiled):
        model = torch_decoder(torch, cfg, case.weights)
        run = torch.compile(model) if compiled else model
        opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD, eps=EPS)

        def forward():
            with torch.no_grad():
                return run(tok)

        def step():
            loss = torch.nn.functional.cross_entropy(run(tok).reshape(-1, cfg.vocab), tgt)
            loss.backward()
            opt.step()
            opt.zero_grad()

        diff = float((forward() - torch.from_numpy(case.ref)).abs().max())
        c0 = dynamo_compile_s()
        first = first_call(step)
        return Peer(name, forward, step, first, diff, compiles=compiled,
                    own_compile=(dynamo_compile_s() - c0) if compiled else None)

    return [peer("PyTorch %s eager" % torch.__version__, False),
            peer("PyTorch %s torch.compile" % torch.__version__, True)]


def xla_peers(case):
    """torch_xla on its CPU device (in .venv-xla, without lazytrace): the spec's own tools."""
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met
    from torch.func import functional_call
    from torch_xla.experimental.assume_pure import assume_pure
    from torch_xla.experimental.scan_layers import scan_layers

    cfg = case.cfg
    dev = torch_xla.device()
    tok = torch.from_numpy(case.tokens).to(dev)
    tgt = torch.from_numpy(case.targets.reshape(-1)).to(dev)

    def peer(mode):
        model = torch_decoder(torch, cfg, case.weights).to(dev)
        if mode == "assume_pure":
            pure = assume_pure(lambda params, h: functional_call(model.layers[0], params, (h,)))

            def per_layer(layers, h):
                for layer in layers:
                    h = pure(dict(layer.named_parameters()), h)
                return h

            model.run_layers = per_layer
        elif mode == "scan_layers":
            model.run_layers = lambda layers, h: scan_layers(layers, h, is_layer_pure=True)
        opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD, eps=EPS)
        traced = []

        def forward():
            with torch.no_grad():
                y = model(tok)
                torch_xla.sync()
                xm.wait_device_ops()
            return y

        def step():
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(model(tok).reshape(-1, cfg.vocab), tgt)
            loss.backward()
            opt.step()
            opt.zero_grad()
            traced.append(time.perf_counter() - t0)  # the step recorded, before its sync
            torch_xla.sync()
            xm.wait_device_ops()

        def compile_s():  # torch_xla's own CompileTime, all graphs so far
            data = met.metric_data("CompileTime")
            return data[1] * 1e-9 if data else 0.0

        diff = float(np.abs(forward().cpu().numpy() - case.ref).max())
        c0 = compile_s()
        first = first_call(step)
        traced.clear()  # the first call's tracing is not a cached call's
        return Peer(f"torch_xla {torch_xla.__version__} {mode}", forward, step, first, diff,
                    own_compile=compile_s() - c0, traced=traced)

    return [peer(mode) for mode in ("plain", "assume_pure", "scan_layers")]


# ---- JAX


def jax_peers(case):
    import jax
    import jax.numpy as jnp
    import optax

    cfg, weights, ref = case.cfg, case.weights, case.ref

    def rms(x, w):
        return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + cfg.norm_eps) * w

    def rotary(x):
        t, dim = x.shape[-2], x.shape[-1]
        half = dim // 2
        inv = jnp.exp(jnp.arange(half, dtype=jnp.float32) * (-2 * math.log(cfg.rope_theta) / dim))
        ang = jnp.arange(t, dtype=jnp.float32)[:, None] * inv[None, :]
        ang = jnp.concatenate([ang, ang], -1)
        rot = jnp.concatenate([-x[..., half:], x[..., :half]], -1)
        return x * jnp.cos(ang) + rot * jnp.sin(ang)

    def layer(h, p):
        b, t, _ = h.shape
        hd, rep = cfg.head_dim, cfg.heads // cfg.kv_heads

        def heads(y, n):
            return y.reshape(b, t, n, hd).transpose(0, 2, 1, 3)

        x = rms(h, p["attn_norm.weight"])
        q = rotary(heads(x @ p["attn.q_proj.weight"].T, cfg.heads))
        k = rotary(heads(x @ p["attn.k_proj.weight"].T, cfg.kv_heads))
        v = heads(x @ p["attn.v_proj.weight"].T, cfg.kv_heads)
        k, v = jnp.repeat(k, rep, 1), jnp.repeat(v, rep, 1)
        s = (q @ k.transpose(0, 1, 3, 2)) / math.sqrt(hd)
        s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -jnp.inf)
        out = (jax.nn.softmax(s, -1) @ v).transpose(0, 2, 1, 3).reshape(b, t, cfg.hidden)
        h = h + out @ p["attn.o_proj.weight"].T
        x = rms(h, p["mlp_norm.weight"])
        m = jax.nn.silu(x @ p["mlp.gate_proj.weight"].T) * (x @ p["mlp.up_proj.weight"].T)
        return h + m @ p["mlp.down_proj.weight"].T

    names = [k[len("layers.0."):] for k in weights if k.startswith("layers.0.")]
    outer = {k: jnp.asarray(v) for k, v in weights.items() if not k.startswith("layers.")}
    per_layer = [{n: jnp.asarray(weights[f"layers.{i}.{n}"]) for n in names} for i in range(cfg.layers)]
    stacked = {n: jnp.stack([pl[n] for pl in per_layer]) for n in names}

    def forward_loop(params, tok):
        h = params["outer"]["embed.weight"][tok]
        for p in params["layers"]:
            h = layer(h, p)
        return rms(h, params["outer"]["norm.weight"]) @ params["outer"]["head.weight"].T

    def forward_scan(params, tok):
        h = params["outer"]["embed.weight"][tok]
        h, _ = jax.lax.scan(lambda c, p: (layer(c, p), None), h, params["layers"])
        return rms(h, params["outer"]["norm.weight"]) @ params["outer"]["head.weight"].T

    tok = jnp.asarray(case.tokens)
    tgt = jnp.asarray(case.targets.reshape(-1))
    def peer(name, fwd, layers):
        params = {"outer": outer, "layers": layers}
        opt = optax.adamw(LR, b1=0.9, b2=0.999, eps=EPS, weight_decay=WD)
        state = {"params": params, "opt": opt.init(params)}

        def loss_fn(p):
            logits = fwd(p, tok).reshape(-1, cfg.vocab)
            return optax.softmax_cross_entropy_with_integer_labels(logits, tgt).mean()

        def train_step(params, opt_state):
            loss, g = jax.value_and_grad(loss_fn)(params)
            updates, opt_state = opt.update(g, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss

        train = jax.jit(train_step)

        jfwd = jax.jit(fwd)

        def forward():
            return jfwd(params, tok).block_until_ready()

        def step():
            state["params"], state["opt"], loss = train(state["params"], state["opt"])
            loss.block_until_ready()

        diff = float(np.abs(np.asarray(forward()) - ref).max())
        first = first_call(step)
        # XLA's compile of the step, lowered afresh from a new jit of it (no cache to hit)
        lowered = jax.jit(lambda p, o: train_step(p, o)).lower(state["params"], state["opt"])
        return Peer(name, forward, step, first, diff, own_compile=first_call(lowered.compile))

    return [peer("JAX %s jit, layers as a loop" % jax.__version__, forward_loop, per_layer),
            peer("JAX %s jit, lax.scan" % jax.__version__, forward_scan, stacked)]


LIBS = {"lazytrace": lazytrace_peers, "torch": torch_peers, "jax": jax_peers, "xla": xla_peers}


def worker(lib, path):
    """Builds the library's rows for the case at path, says so, then times them on request:
    a line "i n" runs row i's forward and step once untimed and n times timed each."""
    def say(obj):
        sys.stdout.write(PROTOCOL + json.dumps(obj) + "\n")
        sys.stdout.flush()

    peers = LIBS[lib](load_case(path))
    say([{"name": p.name, "step_first": p.step_first, "diff": p.diff, "compiles": p.compiles,
          "own_compile": p.own_compile} for p in peers])
    for line in sys.stdin:
        i, n = map(int, line.split())
        p, out = peers[i], {}
        for key, fn in (("forward", p.forward), ("step", p.step)):
            fn()
            out[key] = []
            for _ in range(n):
                t0 = time.perf_counter()
                fn()
                out[key].append(time.perf_counter() - t0)
        if p.traced:
            out["trace"] = statistics.median(p.traced)  # of the step's calls so far
        say(out)


class Worker:
    """A worker process of one library, and its rows."""

    def __init__(self, lib, python, path):
        self.lib = lib
        self.err = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([python, os.path.abspath(__file__), "--worker", lib, path],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err,
                                     text=True)
        self.rows = self.read() or []

    def read(self):
        for line in self.proc.stdout:
            if line.startswith(PROTOCOL):
                return json.loads(line[len(PROTOCOL):])
        return None

    def time(self, i, n):
        self.proc.stdin.write(f"{i} {n}\n")
        self.proc.stdin.flush()
        out = self.read()
        if out is None:
            raise RuntimeError(f"the {self.lib} worker stopped: {self.why()}")
        return out

    def why(self):
        self.err.seek(0)
        lines = self.err.read().strip().splitlines()
        return lines[-1] if lines else f"exit status {self.proc.poll()}"

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()
        self.err.close()


def run_size(case, libs, reps, rounds):
    """(name, forward s, step s, compile s, diff) rows: the workers started one after another
    (each compiles alone), then every row timed in rounds."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "case.npz")
        save_case(path, case)
        workers = []
        for lib, python in libs:
            w = Worker(lib, python, path)
            if w.rows:
                workers.append(w)
            else:
                print(f"  ({lib} left out: {w.why()})")
                w.close()
    per = max(1, -(-reps // rounds))
    turns = [(w, i) for w in workers for i in range(len(w.rows))]
    times = {(id(w), i): {"forward": [], "step": []} for w, i in turns}
    trace = {}  # name: a cached step's trace time
    for r in range(rounds):
        for w, i in turns[r % len(turns):] + turns[:r % len(turns)]:
            out = w.time(i, per)
            for key in ("forward", "step"):
                times[(id(w), i)][key] += out[key]
            if "trace" in out:
                trace[w.rows[i]["name"]] = out["trace"]
    rows = []
    for w, i in turns:
        meta, t = w.rows[i], times[(id(w), i)]
        f, s = statistics.median(t["forward"]), statistics.median(t["step"])
        rows.append((meta["name"], f, s, (meta["step_first"] - s) if meta["compiles"] else 0.0, meta["diff"],
                     trace.get(meta["name"]), meta["own_compile"]))
    for w in workers:
        w.close()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="spec-10,spec-100,compute")
    ap.add_argument("--reps", type=int, default=0, help="timed calls per row (0: the size's own)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds the timed calls are spread over")
    ap.add_argument("--peers", default="torch,jax,xla")
    ap.add_argument("--xla-python", default=".venv-xla/bin/python",
                    help="the Python of the torch_xla environment (scripts/install-deps.sh --peers)")
    ap.add_argument("--libtorch", default=None,
                    help="peers_bench --json output: LibTorch's C++ eager times as a row of each size")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a, rest = ap.parse_known_args()
    if a.worker:
        return worker(a.worker, rest[0])
    import lazytrace as lt
    from lazytrace.models import Decoder, DecoderConfig

    peers = a.peers.split(",")
    libs = [("lazytrace", sys.executable)] + [(p, sys.executable) for p in ("torch", "jax") if p in peers]
    if "xla" in peers and os.path.exists(a.xla_python):
        libs.append(("xla", a.xla_python))
    libtorch = None
    if a.libtorch:
        with open(a.libtorch) as f:
            libtorch = json.load(f)
    print(f"{cpu_model()}, {os.cpu_count()} cpus; python {sys.version.split()[0]}, lazytrace {lt.__version__}")
    ok = True
    for size in a.sizes.split(","):
        kw, batch, seq, reps = SIZES[size]
        reps = a.reps or reps
        cfg = Config(**kw)
        lt.manual_seed(0)
        init = Decoder(DecoderConfig(**asdict(cfg)), layers_mode="loop")
        weights = {k: v.detach().numpy() for k, v in init.named_parameters()}
        rng = np.random.default_rng(2)
        tokens = rng.integers(0, cfg.vocab, size=(batch, seq)).astype(np.int64)
        targets = rng.integers(0, cfg.vocab, size=(batch, seq)).astype(np.int64)
        with lt.no_grad():
            ref = init(lt.tensor(tokens)).numpy()  # the logits every row is checked against
        del init
        rows = run_size(Case(cfg, weights, tokens, targets, ref), libs, reps, a.rounds)
        if libtorch and size in libtorch["sizes"]:
            # timed by peers_bench (C++) on the same sizes; its logits were checked there
            # against lazytrace's C++ model
            t = libtorch["sizes"][size]
            rows.append((f"LibTorch {libtorch['libtorch']} eager (C++)", t["forward_ms"] / 1e3,
                         t["step_ms"] / 1e3, 0.0, t["max_dlogits"], None, None))
        best_f = min(r[1] for r in rows if not r[0].startswith("lazytrace"))  # of the peers
        best_s = min(r[2] for r in rows if not r[0].startswith("lazytrace"))
        n = max(1, -(-reps // a.rounds)) * a.rounds
        print(f"\n### {size}: hidden {cfg.hidden}, intermediate {cfg.intermediate}, {cfg.layers} layers, "
              f"batch {batch} x seq {seq}; medians of {n} calls in {a.rounds} rounds\n")
        print("| | forward ms | fastest peer / this | step ms | fastest peer / this | compile s | own compile s "
              "| trace ms/step | max abs dlogits |")
        print("|---|---|---|---|---|---|---|---|---|")
        for name, f, s, c, d, tr, own in rows:
            bad = d > 1e-4
            ok = ok and not bad
            print(f"| {name} | {f * 1e3:.2f} | {best_f / f:.2f}x | {s * 1e3:.2f} | {best_s / s:.2f}x | "
                  f"{c:.2f} | {'-' if own is None else f'{own:.3f}'} | {'-' if tr is None else f'{tr * 1e3:.2f}'} | "
                  f"{d:.1e}{' MISMATCH' if bad else ''} |")
    print(f"\nlogits {'agree' if ok else 'DO NOT agree'} within 1e-4 of lazytrace's")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
