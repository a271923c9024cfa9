"""torch.nn for lazytrace: Module, Parameter, the layers transformers use, and functional."""

from . import functional, utils
from .module import Module
from .modules import (GELU, Dropout, Embedding, Identity, LayerNorm, Linear, ModuleDict,
                      ModuleList, ReLU, RMSNorm, Sequential, Sigmoid, SiLU, Softmax, Tanh)
from .parameter import Buffer, Parameter
