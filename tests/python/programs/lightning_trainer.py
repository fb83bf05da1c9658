"""A small LightningModule trained by Lightning's Trainer on synthetic data. --leak keeps each step's
loss in a list of the module, or its predictions for an epoch, cleared when the epoch ends (held,
then freed: a cost, reported as such)."""
import argparse
import torch
import lightning as L

parser = argparse.ArgumentParser()
parser.add_argument("--leak", choices=("none", "loss", "epoch-outputs"), default="none")
parser.add_argument("--batches", type=int, default=60)
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
        self.losses = []
        self.outputs = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        prediction = self.net(x)
        loss = torch.nn.functional.mse_loss(prediction, y)
        if args.leak == "loss":
            self.losses.append(loss)
        elif args.leak == "epoch-outputs":
            self.outputs.append(prediction)
        return loss

    def on_train_epoch_end(self):
        self.outputs.clear()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(args.batches * 8, 32), torch.randn(args.batches * 8, 1))
loader = torch.utils.data.DataLoader(data, batch_size=8)
trainer = L.Trainer(max_epochs=args.epochs, accelerator="cpu", logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False)
trainer.fit(Regressor(), loader)
