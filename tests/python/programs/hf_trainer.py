"""A tiny GPT-2 (built from a config) trained by Hugging Face's Trainer on synthetic tokens: nothing
is downloaded. --leak keeps each step's loss, or its logits, in a list from an overridden
compute_loss, the way a user adds one line to a Trainer subclass. --eval-every N evaluates every N
steps, as the Trainer's eval_strategy="steps" does; --predict N runs Trainer.predict on N batches
after training."""
import argparse
import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

parser = argparse.ArgumentParser()
parser.add_argument("--leak", choices=("none", "loss", "logits"), default="none")
parser.add_argument("--steps", type=int, default=80)
parser.add_argument("--eval-every", type=int, default=0,
                    help="evaluate on 100 batches every N optimizer steps (0: never)")
parser.add_argument("--predict", type=int, default=0, help="batches to predict after training")
args = parser.parse_args()

torch.manual_seed(0)
config = GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=0)
model = GPT2LMHeadModel(config)


class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, index):
        ids = torch.randint(0, 128, (32,), generator=torch.Generator().manual_seed(index))
        return {"input_ids": ids, "labels": ids.clone()}


class KeepingTrainer(Trainer):
    kept = []

    def compute_loss(self, model, inputs, return_outputs=False, **kwargs):
        loss, outputs = super().compute_loss(model, inputs, return_outputs=True, **kwargs)
        if args.leak == "loss":
            self.kept.append(loss)
        elif args.leak == "logits":
            self.kept.append(outputs.logits)
        return (loss, outputs) if return_outputs else loss


with tempfile.TemporaryDirectory() as folder:
    evaluation = ({"eval_strategy": "steps", "eval_steps": args.eval_every,
                   "per_device_eval_batch_size": 4} if args.eval_every else {})
    training = TrainingArguments(output_dir=folder, max_steps=args.steps, per_device_train_batch_size=4,
                                 logging_steps=1000, save_strategy="no", report_to=[], use_cpu=True,
                                 dataloader_num_workers=0, disable_tqdm=True, **evaluation)
    evaluated = torch.utils.data.Subset(Tokens(), range(400)) if args.eval_every else None
    trainer = KeepingTrainer(model=model, args=training, train_dataset=Tokens(),
                             eval_dataset=evaluated)
    trainer.train()
    if args.predict:
        predicted = trainer.predict(torch.utils.data.Subset(Tokens(), range(4 * args.predict)))
        print(f"predicted {len(predicted.label_ids)} sequences")
