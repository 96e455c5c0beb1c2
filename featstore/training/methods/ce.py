"""`ce`: standard cross-entropy training (the baseline every post-hoc scorer is applied to).

Loss as implemented: mean over the batch of -log softmax(f(x))_y. The model is unchanged; the
optimiser, schedule and defaults are the trainer's (SGD, lr 0.01, momentum 0.9, weight decay
5e-4: the remote-sensing OOD benchmark's setting, Wang et al. 2024, §2.5).
"""

from __future__ import annotations

from featstore.training.methods import TrainMethod, register


class CrossEntropy(TrainMethod):
    name = "ce"
    paper = "standard supervised training (cross-entropy)"
    params: dict = {}


register(CrossEntropy())
