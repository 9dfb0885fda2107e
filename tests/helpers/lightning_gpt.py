"""The project's GPT as a LightningModule, for the trainer-callback tests (one process and DDP)."""

from __future__ import annotations


def tiny_gpt_module(lightning, lr: float = 0.1, context: int = 8, n_layers: int = 2):
    """A LightningModule (``lightning``: the imported ``lightning.pytorch``, so that nothing imports
    it at collection) around a GPT of vocabulary 13, d_model 16, d_k 8; SGD at ``lr``."""
    import torch

    from attnscale.experiments.training.gpt import GPT, GPTConfig
    from attnscale.scales import InverseSqrtDk

    class Module(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.gpt = GPT(
                GPTConfig(vocab=13, context=context, d_model=16, n_layers=n_layers, d_k=8),
                InverseSqrtDk(),
                figures=False,
            )

        def training_step(self, x, batch_idx):
            loss = torch.nn.functional.cross_entropy(self.gpt(x)[:, :-1].flatten(0, 1), x[:, 1:].flatten())
            self.log("loss", loss)
            self.log("epoch_loss", loss, on_step=False, on_epoch=True)  # a row of the epoch's own
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=lr)

    return Module()
