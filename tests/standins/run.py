"""Runs a training file on recording stand-ins and checks the optimizer-step protocol.

    usage: python3 run.py FILE.py

No torch is needed: `torch`, `apex`, `accelerate`, `deepspeed`, `lightning`, `transformers`,
`tqdm` and any other import resolve to stand-ins that record what the program does (forward,
backward with the scale its loss carries, clip, unscale_, step, update, zero_grad, scheduler
step). The file's module-level code runs, then each function and each class's methods, with
stand-ins chosen by parameter name. Settings (`args.x`, `cfg["y"]`, `scaler` that may be None)
are knobs: a first run records which knobs the program tests, then the program runs again under
every combination of their values (at most 64). Each run's record is checked:

- every optimizer step applies the mean gradient of its window: the backwards since the last
  zero_grad carry scales that add up to 1 (a loss divided by the accumulation factor once);
- no clip before a later backward of the same window, and with a GradScaler no clip before the
  scaler's `unscale_` since its last update;
- GradScaler: one `unscale_` per optimizer and one `step` per update (torch raises otherwise);
- the learning-rate schedule advances at most once per optimizer step.

Prints `ok: N runs` and exits 0, or prints what broke and exits 1.
"""

import ast
import contextlib
import importlib.abc
import importlib.machinery
import itertools
import sys
import types

BATCHES = 64


class Broken(Exception):
    """The program broke the protocol."""


class Enough(Exception):
    """The program runs on (a loop bounded by a large literal): what ran so far is checked."""


# ---- the record ------------------------------------------------------------------------------


class Record:
    def __init__(self):
        self.events = []

    def add(self, *event):
        self.events.append(event)
        if len(self.events) > 4_000:
            raise Enough()


REC = Record()


# ---- knobs: settings the program reads --------------------------------------------------------


class Knobs:
    """The values of the settings for one run, and what the program did with them."""

    def __init__(self, values=None):
        self.values = dict(values or {})
        self.tested = set()
        self.numeric = set()

    def value(self, path, default=None):
        if default is None:
            default = default_for(path)
        return self.values.get(path, default)


def default_for(path):
    """A setting's value when no run chooses it: 4 (an accumulation factor, a flag that is on),
    2 epochs, and room for several updates in a budget or a maximum."""
    name = path.lower().rsplit(".", 1)[-1]
    if "epoch" in name:
        return 2
    if any(w in name for w in ("budget", "total", "num_samples")):
        return 64
    if "max" in name:
        return 8
    return 4


KNOBS = Knobs()


def knob(path, default=None):
    v = KNOBS.value(path, default)
    if v is None:
        return None
    if isinstance(v, Knob):
        return v
    return Knob(v, path)


class Knob(int):
    """A setting: an int (4 by default) that is also a config of settings, a callable, an
    iterable of batches and a mapping."""

    def __new__(cls, value, path):
        k = int.__new__(cls, value)
        k._path = path
        return k

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if name == "zero_grad":
            return lambda *a, **k: REC.add("zero_grad", "model")
        if name in ("parameters", "named_parameters", "modules", "children", "items", "values"):
            return lambda *a, **k: iter([Tensor()])
        if name in ("train", "eval", "cuda", "to", "float", "half"):
            return lambda *a, **k: self
        if name == "get":
            return lambda key, default=None: knob(f"{self._path}.{key}")
        if name == "loss":
            return Tensor()
        return knob(f"{self._path}.{name}")

    def __getitem__(self, key):
        if key == "loss":
            return Tensor()
        return knob(f"{self._path}[{key!r}]")

    def __call__(self, *args, **kwargs):
        return Output()

    def __iter__(self):
        return iter(Loader())

    def __next__(self):
        return Batch()

    def __len__(self):
        return BATCHES

    def __fspath__(self):
        return CONFIG_FILE

    def keys(self):
        return ["input_ids"]

    def __bool__(self):
        # Tested for truth only: a flag, tried off as well as on.
        KNOBS.tested.add(self._path)
        return int.__int__(self) != 0

    def _num(self):
        KNOBS.numeric.add(self._path)
        return int.__int__(self)

    def __gt__(self, o):
        KNOBS.tested.add(self._path)
        return int(self) > o

    def __ge__(self, o):
        KNOBS.tested.add(self._path)
        return int(self) >= o

    def __lt__(self, o):
        KNOBS.tested.add(self._path)
        return int(self) < o

    def __le__(self, o):
        KNOBS.tested.add(self._path)
        return int(self) <= o

    def __eq__(self, o):
        KNOBS.tested.add(self._path)
        return int(self) == o

    def __ne__(self, o):
        KNOBS.tested.add(self._path)
        return int(self) != o

    def __hash__(self):
        return int.__hash__(self)

    def __index__(self):
        return self._num()

    def __float__(self):
        return float(self._num())

    def __int__(self):
        return self._num()


def _arith(op):
    def f(self, other):
        return getattr(int, op)(self._num(), other)

    return f


for _op in ("__mod__", "__rmod__", "__truediv__", "__rtruediv__", "__floordiv__", "__rfloordiv__",
            "__mul__", "__rmul__", "__add__", "__radd__", "__sub__", "__rsub__", "__pow__"):
    setattr(Knob, _op, _arith(_op))


# ---- tensors, models, loaders ----------------------------------------------------------------


class Anything:
    """What an unknown library call returns: callable, subscriptable, iterable as a loader,
    usable as a number, a tensor or a context."""

    def __init__(self, name="value"):
        self._name = name

    def __call__(self, *a, **k):
        return Anything(self._name)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if name in ("loss", "logits"):
            return Tensor()
        if name == "zero_grad":
            return lambda *a, **k: REC.add("zero_grad", "model")
        # Read like a module: what a recognised name stands for (`torch.amp.GradScaler`).
        known = named(self._name, name)
        if not isinstance(known, Anything):
            return known
        return Anything(f"{self._name}.{name}")

    def __getitem__(self, key):
        return Anything(self._name)

    def __iter__(self):
        return iter(Loader())

    def __next__(self):
        return Batch()

    def __len__(self):
        return BATCHES

    def __index__(self):
        return 4

    __int__ = __index__

    def __float__(self):
        return 4.0

    def __bool__(self):
        return True

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False

    def __fspath__(self):
        return CONFIG_FILE

    def keys(self):
        return ["input_ids"]

    def values(self):
        return [Tensor()]

    def items(self):
        return [("loss", Tensor())]

    def _tensor(self, *a):
        # With a number it is a count; with a tensor, a tensor.
        if a and isinstance(a[0], (int, float)) and not isinstance(a[0], bool):
            return 4
        return Tensor()

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _tensor
    __truediv__ = __rtruediv__ = __matmul__ = __rmatmul__ = __pow__ = __neg__ = _tensor
    __floordiv__ = __rfloordiv__ = __mod__ = _tensor

    def __rmod__(self, o):
        # A boundary test on a factor read from a config (`(i + 1) % cfg.accum == 0`): the
        # factor is 4, as it reads as a number.
        if isinstance(o, int) and not isinstance(o, bool):
            return o % 4
        return self._tensor(o)

    def __format__(self, spec):
        return format(4.0, spec) if spec else self._name

    def __lt__(self, o):
        return False

    __gt__ = __le__ = __ge__ = __lt__


CONFIG_FILE = ""


class Tensor:
    """A value that may be a loss: `scale` is what its gradient weighs (1 for a mean loss)."""

    def __init__(self, scale=1.0, scaler=None, parts=1):
        self.scale = scale
        self.scaler = scaler
        # How many losses were added up: dividing by their number averages them.
        self.parts = parts

    def _with(self, scale, parts=1):
        return Tensor(scale, self.scaler, parts)

    def backward(self, *a, **k):
        REC.add("backward", self.scale, self.scaler)

    def __truediv__(self, o):
        if self.parts > 1 and not isinstance(o, Tensor) and _number(o) == self.parts:
            return self._with(self.scale)
        return self._with(_scaled(self.scale, o, lambda a, b: a / b))

    def __mul__(self, o):
        if isinstance(o, Tensor):
            return self._with(self.scale)
        return self._with(_scaled(self.scale, o, lambda a, b: a * b))

    __rmul__ = __mul__

    def __add__(self, o):
        # Losses added up (a weighted sum of means is a mean): the scale they share.
        if isinstance(o, Tensor) and o.scale != self.scale:
            return self._with(None)
        parts = self.parts + o.parts if isinstance(o, Tensor) else self.parts
        return self._with(self.scale, parts)

    __radd__ = __add__
    __sub__ = __add__
    __rsub__ = __add__

    def __neg__(self):
        return self

    # In place (`loss.div_(n)`): the same value, rescaled.
    def div_(self, o):
        self.scale = (self / o).scale
        return self

    true_divide_ = div_

    def mul_(self, o):
        self.scale = (self * o).scale
        return self

    def __getitem__(self, key):
        return self

    def __setitem__(self, key, value):
        pass

    def __iter__(self):
        return iter([self, Tensor()])

    def __next__(self):
        return Batch()

    def __float__(self):
        return 1.0

    def __format__(self, spec):
        return format(1.0, spec) if spec else "tensor"

    def __bool__(self):
        return True

    def __gt__(self, o):
        return False

    __lt__ = __gt__

    def __eq__(self, o):
        # An element-wise comparison (`preds == labels`) is a tensor, counted with `.sum()`.
        return Tensor()

    __ne__ = __eq__
    __hash__ = object.__hash__

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if name in ("loss", "logits"):
            return Tensor()
        if name in ("item",):
            return lambda: 1.0
        if name == "mean" and self.scale is None:
            # A mean of a ratio of tensors (a soft-dice term): a mean loss.
            return lambda *a, **k: self._with(1.0)
        if name in ("size", "numel", "dim"):
            return lambda *a: 16
        if name == "shape":
            return (16, 16)
        if name == "device":
            return "cpu"
        if name == "chunk":
            # `x.chunk(n)`: n pieces, as many as a loop over them runs.
            return lambda n, *a, **k: [Tensor() for _ in range(int(_number(n) or 2))]
        # `.mean()`, `.sum()`, `.cuda()`, `.to(...)`, `.view(...)`, `.T`: the same value.
        return self

    def __call__(self, *a, **k):
        return self

    def keys(self):
        return ["input_ids"]

    def values(self):
        return [self]

    def items(self):
        return [("loss", self)]

    def __matmul__(self, o):
        return self

    __rmatmul__ = __matmul__
    __pow__ = __matmul__
    __rtruediv__ = __matmul__

    def __len__(self):
        return 16

    def __index__(self):
        return 16


def _number(other):
    try:
        return float(other)
    except (TypeError, ValueError):
        return None


def _scaled(scale, other, op):
    """A count (an integer: an accumulation factor, a number of tokens) rescales a loss; a
    fractional weight (`0.5 * soft`) only mixes losses."""
    if scale is None or isinstance(other, Tensor):
        return None if isinstance(other, Tensor) else scale
    try:
        value = float(other)
    except (TypeError, ValueError):
        return None
    if value != int(value) or value == 0:
        return scale
    return op(scale, value)


class Output(Tensor):
    """What a model returns: a mean loss that also has `.loss` and `.logits`."""


class ModelMeta(type):
    """`Model.from_pretrained(...)`, `GPT.from_config(...)`: a model."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *a, **k: cls()


class Model(metaclass=ModelMeta):
    def __init__(self, *a, **k):
        pass

    def __iter__(self):
        return iter(Loader())

    def __len__(self):
        return BATCHES

    def __getitem__(self, key):
        return Anything()

    def __call__(self, *a, **k):
        REC.add("forward")
        return Output()

    def parameters(self, *a, **k):
        return iter([Tensor(), Tensor()])

    named_parameters = parameters

    def zero_grad(self, *a, **k):
        REC.add("zero_grad", "model")

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if name in ("train", "eval", "cuda", "to", "float", "half", "requires_grad_"):
            return ModelMethod(self, name)
        # nanoGPT's `model.configure_optimizers(...)` builds the optimizer.
        if name == "configure_optimizers":
            return Optimizer
        return Anything(f"model.{name}")


class ModelMethod:
    """`model.train()` returns the model; on a config read as one (`cfg = OmegaConf.load(...)`),
    `cfg.train.batch_size` reads a section."""

    def __init__(self, model, name):
        self._model = model
        self._name = name

    def __call__(self, *a, **k):
        return self._model

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Anything(f"{self._name}.{name}")


class Batch(Tensor):
    """A batch: a tensor that unpacks into its parts and reads as a mapping."""

    def __call__(self, *a, **k):
        return Output()

    def keys(self):
        # The fields of the usual tasks, so that a dict rebuilt from the batch has them.
        return [
            "input_ids",
            "attention_mask",
            "labels",
            "token_type_ids",
            "start_positions",
            "end_positions",
            "pixel_values",
        ]

    def items(self):
        return [(k, Tensor()) for k in self.keys()]

    def values(self):
        return [Tensor()]

    def __getitem__(self, key):
        return Tensor()

    def __iter__(self):
        return iter([Tensor() for _ in range(ARITY)])

    def __len__(self):
        return ARITY


ARITY = 2


class Loader:
    def __init__(self, *a, **k):
        pass

    def __iter__(self):
        return iter([Batch() for _ in range(BATCHES)])

    def __next__(self):
        return Batch()

    def __len__(self):
        return BATCHES

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *a, **k: None


def criterion_fn(*a, **k):
    return Tensor()


class Criterion:
    def __init__(self, *a, **k):
        pass

    def __call__(self, *a, **k):
        return Tensor()

    def to(self, *a, **k):
        return self

    cuda = to


# ---- optimizers, schedulers, scalers, clipping -------------------------------------------------


class Optimizer:
    def __init__(self, *a, **k):
        self.param_groups = [{"lr": 1.0, "params": [Tensor()]}]

    def step(self, *a, **k):
        REC.add("step", id(self))

    def zero_grad(self, *a, **k):
        REC.add("zero_grad", id(self))

    def state_dict(self):
        return {}


class Scheduler:
    def __init__(self, *a, **k):
        self.zeroes = False

    def step(self, *a, **k):
        # A "scheduler" that zeroes gradients wraps the optimizer: its step is the optimizer's.
        REC.add("step", id(self)) if self.zeroes else REC.add("sched")

    def zero_grad(self, *a, **k):
        self.zeroes = True
        REC.add("zero_grad", id(self))

    def get_last_lr(self):
        return [1.0]

    def __getattr__(self, name):
        # A noise scheduler's `add_noise`, a scheduler's state: nothing the protocol reads.
        if name.startswith("__"):
            raise AttributeError(name)
        return Anything(f"scheduler.{name}")


class GradScaler:
    """torch's GradScaler protocol: one `unscale_` per optimizer and one `step` per update."""

    def __init__(self, *a, enabled=True, **k):
        self.enabled = bool(enabled)
        self.unscaled = set()
        self.stepped = set()

    def scale(self, loss):
        if not self.enabled:
            return loss
        return Tensor(loss.scale, scaler=self)

    def unscale_(self, opt):
        if not self.enabled:
            return
        if id(opt) in self.unscaled:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if id(opt) in self.stepped:
            raise RuntimeError("unscale_() is being called after step().")
        self.unscaled.add(id(opt))
        REC.add("unscale", id(opt))

    def step(self, opt, *a, **k):
        if self.enabled and id(opt) in self.stepped:
            raise RuntimeError("step() has already been called since the last update().")
        self.stepped.add(id(opt))
        # The optimizer steps, whatever stands for it.
        if isinstance(opt, (Optimizer, Prepared)):
            opt.step()
        else:
            REC.add("step", id(opt))

    def update(self, *a, **k):
        self.unscaled.clear()
        self.stepped.clear()
        REC.add("update")

    def get_scale(self):
        return 1.0


def clip_grad(parameters=None, *a, **k):
    REC.add("clip")
    return Tensor()


# ---- frameworks ---------------------------------------------------------------------------------


class Accelerator:
    """accelerate: divides the loss by its factor, syncs every `factor` calls of accumulate(),
    and gates a prepared optimizer's step and zero_grad on the syncs. Under its DeepSpeed plugin
    (a program that reads it runs under it), the engine divides every backward by its config's
    factor and steps itself on every `factor`-th backward; a prepared optimizer's own step and
    zero_grad do nothing."""

    def __init__(self, *a, gradient_accumulation_steps=1, **k):
        self.factor = int(gradient_accumulation_steps)
        self.calls = 0
        self.sync_gradients = True
        self.device = "cpu"
        self.num_processes = 1
        self.is_main_process = True
        self.deepspeed = False
        self.backwards = 0
        self.optimizers = []

    @contextlib.contextmanager
    def accumulate(self, *models):
        self.calls += 1
        self.sync_gradients = self.calls % self.factor == 0
        yield

    def backward(self, loss, **k):
        scale = loss.scale / self.factor if loss.scale is not None and self.factor > 1 else loss.scale
        REC.add("backward", scale, None)
        if self.deepspeed:
            self.backwards += 1
            if self.backwards % self.factor == 0:
                for opt in self.optimizers:
                    opt.step()
                    opt.zero_grad()

    def prepare(self, *objs):
        self.optimizers += [o for o in objs if isinstance(o, Optimizer)]
        out = tuple(Prepared(o, self) if isinstance(o, (Optimizer, Scheduler)) else o for o in objs)
        return out[0] if len(out) == 1 else out

    def clip_grad_norm_(self, *a, **k):
        REC.add("clip")

    def unwrap_model(self, model):
        return model

    @property
    def state(self):
        # A program that reads the DeepSpeed plugin runs under it: the engine divides by its
        # config's factor.
        self.factor = int(knob("deepspeed_config.gradient_accumulation_steps"))
        self.deepspeed = True
        return knob("accelerator.state")

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Anything(f"accelerator.{name}")


class Prepared:
    def __init__(self, opt, acc):
        self.opt, self.acc = opt, acc

    def step(self, *a, **k):
        if self.acc.sync_gradients and not self.acc.deepspeed:
            self.opt.step()

    def zero_grad(self, *a, **k):
        if self.acc.sync_gradients and not self.acc.deepspeed:
            self.opt.zero_grad()


class Engine:
    """A DeepSpeed engine: backward divides by the config's factor, step steps every factor."""

    def __init__(self, factor):
        self.factor = factor
        self.opt = Optimizer()
        self.calls = 0
        self.device = "cpu"

    def __call__(self, *a, **k):
        REC.add("forward")
        return Output()

    def backward(self, loss, scale_wrt_gas=True, **k):
        scale = loss.scale / self.factor if loss.scale is not None and scale_wrt_gas else loss.scale
        REC.add("backward", scale, None)

    def step(self, *a, **k):
        self.calls += 1
        if self.calls % self.factor == 0:
            self.opt.step()
            self.opt.zero_grad()

    def gradient_accumulation_steps(self):
        return self.factor

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Anything(f"engine.{name}")


def deepspeed_initialize(*a, config=None, **k):
    factor = 4
    if isinstance(config, dict):
        factor = int(config.get("gradient_accumulation_steps", 1))
    engine = Engine(factor)
    return engine, engine.opt, Loader(), Scheduler()


class LightningModule(Model):
    """Lightning: `training_step` is driven like the Trainer does (see `drive_lightning`)."""

    def __init__(self, *a, **k):
        self.automatic_optimization = True
        self._opt = None

    def log(self, *a, **k):
        pass

    def _configured(self):
        if self._opt is None:
            made = self.configure_optimizers()
            opt, sched = made, None
            if isinstance(made, (tuple, list)) and len(made) == 2 and isinstance(made[0], list):
                opt, sched = made[0][0], (made[1][0] if made[1] else None)
            elif isinstance(made, dict):
                opt, sched = made.get("optimizer"), made.get("lr_scheduler")
            self._opt = opt if isinstance(opt, Optimizer) else Optimizer()
            self._sched = sched if isinstance(sched, Scheduler) else Scheduler()
        return self._opt, self._sched

    def optimizers(self):
        return self._configured()[0]

    def lr_schedulers(self):
        return self._configured()[1]

    @property
    def trainer(self):
        return knob("trainer")

    def manual_backward(self, loss, *a, **k):
        REC.add("backward", loss.scale, None)

    def parameters(self, *a, **k):
        return iter([Tensor()])

    @property
    def hparams(self):
        return knob("hparams")

    def save_hyperparameters(self, *a, **k):
        pass


class Fabric:
    def __init__(self, *a, **k):
        pass

    def backward(self, loss, *a, **k):
        REC.add("backward", loss.scale, None)

    def no_backward_sync(self, *a, **k):
        return contextlib.nullcontext()

    def setup(self, *objs):
        return objs[0] if len(objs) == 1 else objs

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Anything(f"fabric.{name}")


class Amp:
    """apex's amp: scale_loss yields the loss (apex unscales before the step by itself)."""

    def initialize(self, model, optimizer, *a, **k):
        return model, optimizer

    @contextlib.contextmanager
    def scale_loss(self, loss, optimizer, **k):
        yield loss

    def master_params(self, optimizer):
        return iter([Tensor()])

    def state_dict(self):
        return {}


class Passthrough:
    """`tqdm(loader)`, `enumerate`-like wrappers: the iterable itself."""

    def __call__(self, iterable=None, *a, **k):
        return iterable if iterable is not None else Loader()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *a, **k: None


passthrough = Passthrough()


def null_context(*a, **k):
    return contextlib.nullcontext()


OPTIMIZERS = {"SGD", "Adam", "AdamW", "Adafactor", "Lion", "RMSprop", "Adagrad", "AdamW8bit"}


def named(path, name):
    """What `module.name` stands for, by what it is called."""
    if name == "amp" and path.startswith("apex"):
        return Amp()
    if name in ("lr_scheduler", "optim", "nn", "utils", "data", "cuda", "functional", "pytorch"):
        return Stub(f"{path}.{name}")
    if name in OPTIMIZERS or (path.endswith(".optim") and name[:1].isupper() and name != "Optimizer"):
        return Optimizer
    if name == "Optimizer":
        return Optimizer
    if name == "GradScaler":
        return GradScaler
    if name in ("clip_grad_norm_", "clip_grad_value_"):
        return clip_grad
    if name == "DataLoader":
        return Loader
    if name in ("autocast", "no_grad", "inference_mode", "no_sync", "enable_grad"):
        return null_context
    if name == "tqdm" or name == "enumerate":
        return passthrough
    if name.endswith("Loss"):
        return Criterion
    if "schedule" in name.lower() or name.endswith("LR") or name.startswith("LambdaLR"):
        return Scheduler
    if name == "Accelerator":
        return Accelerator
    if name == "initialize" and path.startswith("deepspeed"):
        return deepspeed_initialize
    if name == "LightningModule":
        return LightningModule
    if name == "Fabric":
        return Fabric
    if name in ("Module",):
        return Model
    if name == "from_pretrained":
        return Model
    if path.endswith("functional") and name[:1].islower():
        return criterion_fn
    if name[:1].isupper():
        return Model
    if name in ("save", "manual_seed", "set_seed"):
        return lambda *a, **k: None
    # A config file read by a library (`yaml.safe_load(open(path))`): the run's settings.
    if path.split(".")[0] in ("yaml", "toml", "tomli") and name in ("safe_load", "load", "full_load"):
        return lambda *a, **k: knob("config")
    return Anything(f"{path}.{name}")


class Stub(types.ModuleType):
    """A module whose every name is a stand-in."""

    def __init__(self, name):
        super().__init__(name)
        self.__path__ = []

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = named(self.__name__, name)
        setattr(self, name, value)
        return value

    def __call__(self, *a, **k):
        return Model()


class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Every import the file makes, but its own folder's modules and the standard library."""

    def __init__(self, own):
        self.own = own

    def find_spec(self, name, path=None, target=None):
        root = name.split(".")[0]
        if root in sys.stdlib_module_names or root in self.own or root in ("org", "java"):
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        return Stub(spec.name)

    def exec_module(self, module):
        pass


# ---- entry points -----------------------------------------------------------------------------


def standin(name, annotation=""):
    """A stand-in for a parameter, by its name (and annotation)."""
    n = name.lower()
    a = annotation.lower()
    if "fabric" in n or "fabric" in a:
        return Fabric()
    if "scaler" in n:
        if not KNOBS.value(f"<{name}>", 1):
            return None
        # A scaler is on when the run's 16-bit setting is (a `cfg.fp16` knob set to 0 turns
        # it off).
        off = any(
            v == 0 and any(w in p.lower() for w in ("fp16", "amp", "half", "mixed"))
            for p, v in KNOBS.values.items()
        )
        return GradScaler(enabled=not off)
    if n in ("optimizer", "opt", "optim") or "optimizer" in n:
        return Optimizer()
    if "sched" in n:
        return Scheduler()
    if "loader" in n or n in ("batches", "data", "dl", "rollouts", "window_iter", "dataset", "train_data"):
        return Loader()
    if n in ("model", "net", "backbone", "head", "policy", "encoder", "decoder", "module", "network"):
        return Model()
    if n in ("criterion", "loss_fn", "loss_fun", "loss_fct", "compute_loss"):
        return Criterion()
    if n == "next_batch":
        return lambda: Batch()
    # An iterator of batches the program calls `next()` on, for as many steps as it likes.
    if n.split("_")[0] in ("data", "train", "batch", "loader") and n.endswith("_iter"):
        return itertools.cycle(Loader())
    if n in ("x", "y", "xb", "yb", "inputs", "labels", "targets", "images", "input_ids", "tokens", "logits") or "loss" in n:
        return Tensor()
    if n == "device":
        return "cpu"
    return knob(name)


def params_of(fn):
    import inspect

    out = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        out.append((p.name, str(p.annotation) if p.annotation is not p.empty else ""))
    return out


def micro_step(fn_node):
    """A function with no loop of its own that runs a backward: it is called once per batch."""
    loops = any(isinstance(n, (ast.For, ast.While)) for n in ast.walk(fn_node))
    backward = any(
        isinstance(n, ast.Attribute) and n.attr in ("backward", "manual_backward", "scale")
        for n in ast.walk(fn_node)
    )
    return backward and not loops


def scalers_by_use(fn_node):
    """Parameters the function uses as a GradScaler (`amp.scale(loss)`, `gs.unscale_(opt)`)."""
    if fn_node is None:
        return set()
    return {
        n.func.value.id
        for n in ast.walk(fn_node)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr in ("scale", "unscale_")
        and isinstance(n.func.value, ast.Name)
    }


def call(fn, fn_node):
    params = params_of(fn)
    scalers = scalers_by_use(fn_node)
    times = BATCHES if fn_node is not None and micro_step(fn_node) else 1
    # A function handed a scaler that runs no backward itself: its caller's backward scaled
    # the gradients it receives.
    scaled_elsewhere = fn_node is not None and any("scaler" in n.lower() for n, _ in params) and not any(
        isinstance(x, ast.Attribute) and x.attr == "backward" for x in ast.walk(fn_node)
    )
    for i in range(times):
        if scaled_elsewhere:
            REC.add("backward", 1.0, "caller")
        args = []
        for n, a in params:
            # The batch's index: `i`, `step`, `batch_idx`, `global_step`, `iteration`.
            words = n.lower().split("_")
            # `data_iter` and `train_iter` hand batches, not an index.
            batches = words[-1] == "iter" and words[0] in ("data", "train", "batch", "loader")
            index = words[-1] in ("step", "idx", "iter", "index", "iteration") and not (
                {"per", "num", "n", "accum", "update"} & set(words) or batches
            )
            if n in ("i", "it", "n") or index:
                args.append(i)
            elif n in ("batch", "micro_batch", "mb"):
                args.append(Batch())
            elif n in scalers:
                args.append(standin(f"{n}_scaler", a))
            else:
                args.append(standin(n, a))
        try:
            fn(*args)
        except StopIteration:
            # `next(data)` past the stand-ins' batches: the data ran out, as a run's does.
            return


def drive_lightning(cls, tree_cls):
    module = cls.__new__(cls)
    module.__init__(*[standin(n, a) for n, a in params_of(module.__init__)])
    if not getattr(module, "automatic_optimization", True):
        for i in range(BATCHES):
            module.training_step(Batch(), i)
        return
    factor = 4
    opt = module.optimizers()
    for i in range(BATCHES):
        loss = module.training_step(Batch(), i)
        if isinstance(loss, dict):
            loss = loss.get("loss")
        if loss is not None:
            REC.add("backward", None if loss.scale is None else loss.scale / factor, None)
        if (i + 1) % factor == 0:
            opt.step()
            opt.zero_grad()


def stubbed_not_implemented(tree, module):
    """`def build(): raise NotImplementedError`: stand-ins chosen by the names it is unpacked
    into (`model, optimizer, loader = build()`)."""
    stubs = {
        n.name
        for n in tree.body
        if isinstance(n, ast.FunctionDef)
        and len(n.body) == 1
        and isinstance(n.body[0], ast.Raise)
    }
    targets = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Name):
            if n.value.func.id in stubs:
                t = n.targets[0]
                names = [e.id for e in t.elts] if isinstance(t, ast.Tuple) else [getattr(t, "id", "x")]
                targets[n.value.func.id] = names
    module["_stubs"] = stubs

    def make(names):
        def stub(*a, **k):
            # Unpacked (`model, optimizer, loader = build()`): `_unpack` picks by the names.
            if names == ["x"]:
                return Anything("built")
            made = [standin(x) for x in names]
            return made[0] if len(made) == 1 else tuple(made)

        return stub

    module["_stub_factories"] = {s: make(targets.get(s, ["x"])) for s in stubs}


# ---- the protocol -----------------------------------------------------------------------------


def check(events):
    mass = 0.0  # summed scale of the backwards since the last zero_grad (None: unknown)
    pending = 0  # backwards since the last step
    clipped_at = None
    unscaled = False
    scaled_since_update = False
    sched_since_step = 0
    windows = []
    for k, e in enumerate(events):
        kind = e[0]
        if kind == "backward":
            if clipped_at is not None:
                raise Broken(f"a clip (event {clipped_at}) before a later backward of the same window")
            pending += 1
            if e[2] is not None:
                scaled_since_update = True
            mass = None if mass is None or e[1] is None else mass + e[1]
        elif kind == "zero_grad":
            mass = 0.0
        elif kind == "clip":
            if scaled_since_update and not unscaled:
                raise Broken("a clip of gradients a GradScaler still scales (no unscale_ since its update)")
            clipped_at = k
        elif kind == "unscale":
            unscaled = True
        elif kind == "update":
            if pending:
                raise Broken("the loss scale changed between backwards of one window")
            unscaled = False
            scaled_since_update = False
        elif kind == "sched":
            sched_since_step += 1
            if sched_since_step > 1:
                raise Broken("the schedule advanced twice between optimizer steps")
        elif kind == "step":
            windows.append((pending, mass))
            pending = 0
            clipped_at = None
            sched_since_step = 0
    # The windows of the usual length (a first or last window may be shorter) each apply their
    # mean gradient: the scales of their backwards add up to one.
    lengths = [n for n, _ in windows if n]
    if lengths:
        usual = max(set(lengths), key=lambda n: (lengths.count(n), n))
        for n, m in windows:
            if n == usual and m is not None and abs(m - 1.0) > 1e-6:
                raise Broken(f"an optimizer step applied {m:g} times the window's mean gradient")


# ---- main -------------------------------------------------------------------------------------


def run_once(path, tree, values):
    global KNOBS, REC
    KNOBS = Knobs(values)
    REC = Record()
    try:
        run_file_with_stubs(path, tree)
    except Enough:
        pass
    return REC.events, KNOBS


def standin_open(file, *a, **k):
    """`open(args.deepspeed_config)`: a path the program computes opens the stand-ins' config."""
    if isinstance(file, (Anything, Knob)):
        file = CONFIG_FILE
    return open(file, *a, **k)


def called_names(tree):
    """Names the file calls (`helper(...)`, `self.helper(...)`): helpers, not entry points."""
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            f = n.func
            if isinstance(f, ast.Name):
                out.add(f.id)
            elif (
                isinstance(f, ast.Attribute)
                and isinstance(f.value, ast.Name)
                and f.value.id in ("self", "cls")
            ):
                out.add(f.attr)
    # A method called on an instance of a class of the file (`cb.on_batch_end(i)`).
    classes = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    instances = {
        t.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
        and isinstance(n.value.func, ast.Name) and n.value.func.id in classes
        for t in n.targets if isinstance(t, ast.Name)
    }
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
            if isinstance(n.func.value, ast.Name) and n.func.value.id in instances:
                out.add(n.func.attr)
    return out


def run_file_with_stubs(path, tree):
    source = compile(tree, path, "exec")
    module = {
        "__name__": "__main__",
        "__file__": path,
        "_unpack": unpack,
        "_own_schedule": own_schedule,
        "open": standin_open,
    }
    stubbed_not_implemented(tree, module)
    exec(source, module)
    for name, factory in module["_stub_factories"].items():
        module[name] = factory
    helpers = called_names(tree)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name.startswith("_") or node.name in module["_stubs"] or node.name in helpers:
                continue
            call(module[node.name], node)
        elif isinstance(node, ast.ClassDef):
            cls = module[node.name]
            if isinstance(cls, type) and issubclass(cls, LightningModule):
                drive_lightning(cls, node)
                continue
            obj = cls.__new__(cls)
            if "__init__" in cls.__dict__:
                obj.__init__(*[standin(n, a) for n, a in params_of(obj.__init__)])
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and not item.name.startswith("_"):
                    if item.name in ("configure_optimizers", "forward") or item.name in helpers:
                        continue
                    call(getattr(obj, item.name), item)


def unpack(value, names):
    """`a, b = value`: the value when it is a real sequence of that length, else a stand-in for
    each name."""
    if isinstance(value, (tuple, list)) and len(value) == len(names):
        return value
    if isinstance(value, dict) and len(value) == len(names):
        return list(value)
    if isinstance(value, (Batch, Tensor)):
        return tuple(Tensor() for _ in names)
    return tuple(standin(n) for n in names)


class SiblingImports(ast.NodeTransformer):
    """`from . import m` and `from .m import f` name modules beside the file, which runs as a
    script with its folder on the path: they are imported as `import m` and `from m import f`."""

    def visit_ImportFrom(self, node):
        if node.level != 1:
            return node
        if node.module is None:
            return ast.copy_location(ast.Import(names=node.names), node)
        node.level = 0
        return node


class OwnSchedules(ast.NodeTransformer):
    """A class of the file that is built on an optimizer and stepped (`warm = Warmup(opt, ...)`,
    `warm.step()`) is a schedule: its steps are recorded as a scheduler's."""

    def visit_ClassDef(self, node):
        if any(isinstance(f, ast.FunctionDef) and f.name == "step" for f in node.body):
            node.decorator_list.append(ast.Name("_own_schedule", ast.Load()))
        return node


def own_schedule(cls):
    step = cls.step

    def recorded(self, *a, **k):
        if not isinstance(self, Optimizer) and any(
            isinstance(v, Optimizer) for v in vars(self).values()
        ):
            REC.add("sched")
        return step(self, *a, **k)

    cls.step = recorded
    return cls


class Unpacking(ast.NodeTransformer):
    """Tuple targets unpack through `_unpack`, so a stand-in gives as many parts as the program
    asks for: `x, y = next(it)`, `for i, (img, mask, meta) in enumerate(loader):`."""

    def __init__(self):
        self.k = 0

    def names(self, t):
        return [e.id if isinstance(e, ast.Name) else "_" for e in t.elts]

    def wrapped(self, t, value):
        names = ast.List([ast.Constant(n) for n in self.names(t)], ast.Load())
        call = ast.Call(ast.Name("_unpack", ast.Load()), [value, names], [])
        return ast.Assign([t], call)

    def visit_Assign(self, node):
        self.generic_visit(node)
        t = node.targets[0]
        if len(node.targets) == 1 and isinstance(t, ast.Tuple) and all(
            isinstance(e, (ast.Name, ast.Starred)) for e in t.elts
        ) and not any(isinstance(e, ast.Starred) for e in t.elts):
            return ast.copy_location(self.wrapped(t, node.value), node)
        return node

    def visit_For(self, node):
        self.generic_visit(node)
        pre = []

        def replace(t):
            if isinstance(t, ast.Tuple) and all(isinstance(e, ast.Name) for e in t.elts):
                self.k += 1
                tmp = f"_part{self.k}"
                pre.append(self.wrapped(ast.Tuple(t.elts, ast.Store()), ast.Name(tmp, ast.Load())))
                return ast.Name(tmp, ast.Store())
            return t

        target = node.target
        if isinstance(target, ast.Tuple) and any(isinstance(e, ast.Tuple) for e in target.elts):
            target.elts = [replace(e) for e in target.elts]
        elif isinstance(target, ast.Tuple):
            iterable = node.iter
            # `for k, v in d.items()` and `for i, x in enumerate(...)` unpack real pairs.
            real = isinstance(iterable, ast.Call) and (
                (isinstance(iterable.func, ast.Name) and iterable.func.id in ("enumerate", "zip"))
                or (isinstance(iterable.func, ast.Attribute) and iterable.func.attr == "items")
            )
            if not real:
                node.target = replace(target)
        node.body = pre + node.body
        return node


def batch_arity(tree):
    """How many parts the program unpacks a batch into: the most common size of the tuples its
    loops and `next()` calls unpack."""
    sizes = []
    for n in ast.walk(tree):
        target = None
        if isinstance(n, ast.For):
            target = n.target
            if isinstance(target, ast.Tuple) and len(target.elts) == 2 and isinstance(target.elts[1], ast.Tuple):
                target = target.elts[1]
        elif isinstance(n, ast.Assign) and isinstance(n.value, ast.Call):
            f = n.value.func
            if isinstance(f, ast.Name) and f.id == "next":
                target = n.targets[0]
        if isinstance(target, ast.Tuple):
            sizes.append(len(target.elts))
    arity = max(set(sizes), key=sizes.count) if sizes else 2
    # `batch[3]`: a batch has at least four parts.
    for n in ast.walk(tree):
        if (
            isinstance(n, ast.Subscript)
            and isinstance(n.value, ast.Name)
            and "batch" in n.value.id
            and isinstance(n.slice, ast.Constant)
            and isinstance(n.slice.value, int)
        ):
            arity = max(arity, n.slice.value + 1)
    return arity


class ParsedArgs:
    """What `parser.parse_args()` gives, its numbers and switches read as knobs that start at
    the parser's defaults."""

    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        v = getattr(self._real, name)
        # Read without testing it: a knob it already is stays as the program will use it.
        if isinstance(v, bool) or (isinstance(v, int) and int.__int__(v) >= 0):
            return knob(f"args.{name}", int.__int__(v))
        return v


def patch_argparse():
    import argparse

    parse = argparse.ArgumentParser.parse_args
    known = argparse.ArgumentParser.parse_known_args

    def parse_args(self, *a, **k):
        return ParsedArgs(parse(self, *a, **k))

    def parse_known_args(self, *a, **k):
        ns, rest = known(self, *a, **k)
        return ParsedArgs(ns), rest

    argparse.ArgumentParser.parse_args = parse_args
    argparse.ArgumentParser.parse_known_args = parse_known_args

    # No command line is given: a required option reads as unset, as its default would; a
    # required whole number (a factor or a count) reads as 4, the stand-ins' factor.
    add = argparse._ActionsContainer.add_argument

    def add_argument(self, *a, **k):
        if k.pop("required", False) and k.get("type") is int and "default" not in k:
            k["default"] = 4
        return add(self, *a, **k)

    argparse._ActionsContainer.add_argument = add_argument


def main(path):
    import os
    import tempfile

    patch_argparse()

    global ARITY, CONFIG_FILE

    folder = os.path.dirname(os.path.abspath(path))
    sys.path.insert(0, folder)
    own = {f[:-3] for f in os.listdir(folder) if f.endswith(".py")}
    sys.meta_path.insert(0, Finder(own))
    sys.argv = [path]
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    ARITY = batch_arity(tree)
    tree = ast.fix_missing_locations(
        OwnSchedules().visit(Unpacking().visit(SiblingImports().visit(tree)))
    )
    # A config the program opens by a path it computes: a small DeepSpeed-like one.
    handle, CONFIG_FILE = tempfile.mkstemp(suffix=".json")
    with os.fdopen(handle, "w") as f:
        f.write('{"gradient_accumulation_steps": 4, "train_micro_batch_size_per_gpu": 4}')
    _, first = run_once(path, tree, {})
    tested = sorted(first.tested | {p for p in first.values})
    # Each tested knob: on and off (or one and four for a factor compared with one).
    choices = []
    for p in tested:
        choices.append([(p, 4), (p, 0 if p not in first.numeric else 1)])
    scalers = sorted({f"<{n}>" for n in scaler_params(tree)})
    for s in scalers:
        choices.append([(s, 1), (s, 0)])
    combos = list(itertools.product(*choices))[:64] if choices else [()]
    runs = 0
    for combo in combos:
        values = dict(combo)
        events, _ = run_once(path, tree, values)
        try:
            check(events)
        except Broken as e:
            print(f"{path}: under {values or 'the defaults'}: {e}")
            print("  events: " + ", ".join(ev[0] for ev in events[:60]))
            return 1
        runs += 1
    print(f"ok: {runs} runs")
    return 0


def scaler_params(tree):
    """Scaler parameters the program tests for None (`if scaler is not None:`)."""
    tested = set()
    for n in ast.walk(tree):
        test = getattr(n, "test", None)
        if test is not None:
            for t in ast.walk(test):
                if isinstance(t, ast.Name):
                    tested.add(t.id)
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.arg) and "scaler" in n.arg.lower() and n.arg in tested:
            out.add(n.arg)
    return out


if __name__ == "__main__":
    target = sys.argv[1]
    try:
        sys.exit(main(target))
    except Broken as e:
        print(f"{target}: {e}")
        sys.exit(1)
