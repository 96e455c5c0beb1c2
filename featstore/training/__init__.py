"""Training whose checkpoints featstore extracts (the training layer, DESIGN §8).

`config` (the one TrainConfig, optimiser and schedule), `loop` (the one training loop),
`trainer` (`featstore train`: a spec's id/train split, any method, a checkpoint), `ce` (the
demo's in-memory cross-entropy), `methods/` (one module per training method), `presets`
(papers' optimiser settings), `auxdata` (outlier data of OE and MCD). The networks the methods
train live in `featstore.extraction.heads`, so loading and extracting a model never imports this
package.
"""
