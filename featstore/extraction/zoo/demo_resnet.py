"""The demo's small torchvision-style ResNet for 32x32 inputs.

Stem conv3x3(3->16) + BN + ReLU, then three stages of torchvision's `BasicBlock` (16, 32, 64
channels; strides 1, 2, 2), global average pooling and a Linear head: the penultimate feature
has D = 64. About 0.2M parameters; trains to >= 95% on the digits in well under a minute.
"""

from __future__ import annotations

from torch import nn
from torchvision.models.resnet import BasicBlock


def _stage(inplanes: int, planes: int, stride: int) -> nn.Sequential:
    down = None
    if stride != 1 or inplanes != planes:
        down = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False),
                             nn.BatchNorm2d(planes))
    return nn.Sequential(BasicBlock(inplanes, planes, stride, down))


class DemoResNet(nn.Module):
    """ResNet-style classifier for 3x32x32 images with a 64-dim penultimate feature."""

    def __init__(self, num_classes: int = 6, width: int = 16, dropout: float = 0.0):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU(inplace=True))
        self.layer1 = _stage(width, width, 1)
        self.layer2 = _stage(width, 2 * width, 2)
        self.layer3 = _stage(2 * width, 4 * width, 2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.fc = nn.Linear(4 * width, num_classes)

    def forward_features(self, x):
        return self.layer3(self.layer2(self.layer1(self.stem(x))))

    def forward(self, x):
        h = self.pool(self.forward_features(x)).flatten(1)
        return self.fc(self.dropout(h))


def demo_resnet(num_classes: int = 6) -> DemoResNet:
    """`featstore extract --model featstore.extraction.zoo.demo_resnet:demo_resnet` entry point."""
    return DemoResNet(num_classes=num_classes)
