# A whole training program with no memseal in it, for `memseal run`, shaped like pytorch/examples'
# mnist and word_language_model: epochs of train() then evaluate() on validation data, and a last
# evaluate() on test data.
#
#   memseal run -- python examples/scripts/phases.py --leak total-local
#
# Memory that a phase builds up and frees when it ends is not a leak; memory that outlives the
# phase is. --leak chooses a bug, or a healthy pattern that must not be flagged:
#   none         healthy: `total_loss += loss.item()`, reset at each log line (the default);
#   total-local  `total_loss += loss` in train()'s locals, never reset: every batch's graph stays
#                alive until train() returns (the PyTorch FAQ's leak);
#   total-reset  the same, reset at each log line: graphs pile up and are freed every interval;
#   val-grad     evaluate() runs with autograd on and keeps each batch's output, with its graph, for
#                a metric after the loop: freed when evaluate() returns;
#   metrics      healthy: evaluate() keeps each batch's predictions (no history) for the accuracy;
#   global-list  train() appends each batch's loss, with its graph, to a global list never cleared.
# --model mlp|lstm|transformer picks the network; --epochs, --train-batches, --eval-batches and
# --log-interval shape the run; --exit-code sets the exit status.
import argparse
import contextlib
import math
import sys
import time

import torch
from torch import nn
from torch.nn import functional as F

# Every batch's loss of --leak global-list: nothing ever clears it.
history = []


class MLP(nn.Module):
    def __init__(self, features, hidden, classes):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, classes))

    def init_state(self, batch_size):
        return None

    def forward(self, data, state):
        return F.log_softmax(self.net(data), dim=-1), state


class LSTMModel(nn.Module):
    """word_language_model's RNNModel: embedding, 2-layer LSTM, decoder over the vocabulary."""

    def __init__(self, ntokens, emsize, nhid, nlayers, dropout=0.2):
        super().__init__()
        self.ntokens, self.nhid, self.nlayers = ntokens, nhid, nlayers
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntokens, emsize)
        self.rnn = nn.LSTM(emsize, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntokens)

    def init_state(self, batch_size):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, batch_size, self.nhid),
                weight.new_zeros(self.nlayers, batch_size, self.nhid))

    def forward(self, data, hidden):
        embedded = self.drop(self.encoder(data))
        output, hidden = self.rnn(embedded, hidden)
        decoded = self.decoder(self.drop(output)).view(-1, self.ntokens)
        return F.log_softmax(decoded, dim=1), hidden


class TransformerModel(nn.Module):
    """One causal encoder layer over token and learned position embeddings."""

    def __init__(self, ntokens, d_model, bptt):
        super().__init__()
        self.ntokens, self.d_model, self.bptt = ntokens, d_model, bptt
        self.encoder = nn.Embedding(ntokens, d_model)
        self.position = nn.Embedding(bptt, d_model)
        self.layer = nn.TransformerEncoderLayer(d_model, nhead=2, dim_feedforward=128)
        self.head = nn.Linear(d_model, ntokens)

    def init_state(self, batch_size):
        # The state is the causal mask: made once per phase, like word_language_model's src_mask.
        return nn.Transformer.generate_square_subsequent_mask(self.bptt)

    def forward(self, data, mask):
        positions = self.position(torch.arange(data.size(0))).unsqueeze(1)
        embedded = self.encoder(data) * math.sqrt(self.d_model) + positions
        output = self.layer(embedded, src_mask=mask)
        return F.log_softmax(self.head(output).view(-1, self.ntokens), dim=1), mask


def batchify(tokens, batch_size):
    # Columns of a token stream, as word_language_model lays out its corpus: (length, batch).
    length = tokens.size(0) // batch_size
    return tokens[:length * batch_size].view(batch_size, length).t().contiguous()


def make_batches(args, count, teacher):
    """`count` (data, targets) pairs of synthetic data for the model chosen."""
    if args.model == "mlp":
        inputs = torch.randn(count * args.batch_size, args.features)
        # Labels from a fixed random teacher, so the classifier has something to learn.
        labels = (inputs @ teacher).argmax(dim=1)
        return list(zip(inputs.split(args.batch_size), labels.split(args.batch_size)))
    source = batchify(torch.randint(args.ntokens, ((count * args.bptt + 1) * args.batch_size,)),
                      args.batch_size)
    batches = []
    for i in range(0, source.size(0) - 1, args.bptt):
        seq_len = min(args.bptt, source.size(0) - 1 - i)
        batches.append((source[i:i + seq_len], source[i + 1:i + 1 + seq_len].reshape(-1)))
    return batches[:count]


def repackage_hidden(hidden):
    # Detach the hidden state from the previous batch's graph, or backward would reach every batch.
    if isinstance(hidden, torch.Tensor):
        return hidden.detach()
    return tuple(repackage_hidden(h) for h in hidden)


def train(args, model, optimizer, criterion, batches, epoch):
    model.train()
    state = model.init_state(args.batch_size)
    # A running count of right answers, reported at each log line.
    correct = torch.zeros((), dtype=torch.long)
    total_loss = 0.0
    counted = seen = 0
    started = time.time()
    for batch, (data, targets) in enumerate(batches):
        if args.model == "lstm":
            state = repackage_hidden(state)
        optimizer.zero_grad()
        output, state = model(data, state)
        loss = criterion(output, targets)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optimizer.step()

        if args.leak == "total-local":
            total_loss += loss  # leak: total-local
        elif args.leak == "total-reset":
            total_loss += loss  # leak: total-reset
        else:
            total_loss += loss.item()
        if args.leak == "global-list":
            history.append(loss)  # leak: global-list
        correct += (output.argmax(dim=-1) == targets).sum()
        counted += 1
        seen += targets.numel()

        if (batch + 1) % args.log_interval == 0:
            # .item() rather than float(): the leaky totals are tensors with history.
            cur_loss = (total_loss.item() if torch.is_tensor(total_loss) else total_loss) / counted
            ppl = torch.exp(torch.tensor(cur_loss))
            ms_per_batch = (time.time() - started) * 1000 / args.log_interval
            print(f"| epoch {epoch:3d} | {batch + 1:5d}/{len(batches):5d} batches | "
                  f"ms/batch {ms_per_batch:5.2f} | loss {cur_loss:5.2f} | ppl {ppl.item():8.2f} | "
                  f"acc {correct.item() / seen:5.3f} | grad norm {grad_norm.item():5.2f}")
            # --leak total-local keeps its total for the whole epoch: train() returning frees it.
            if args.leak != "total-local":
                total_loss, counted = 0, 0
            correct.zero_()
            seen = 0
            started = time.time()


def evaluate(args, model, criterion, batches):
    """The mean loss and the accuracy over `batches`."""
    model.eval()
    state = model.init_state(args.batch_size)
    total_loss = 0.0
    correct = seen = 0
    # What --leak val-grad and --leak metrics keep for the accuracy after the loop.
    outputs, kept_targets = [], []
    grad_mode = contextlib.nullcontext() if args.leak == "val-grad" else torch.no_grad()
    with grad_mode:
        for data, targets in batches:
            if args.model == "lstm":
                state = repackage_hidden(state)
            output, state = model(data, state)
            total_loss += criterion(output, targets).item()
            if args.leak == "val-grad":
                outputs.append(output)  # leak: val-grad
                kept_targets.append(targets)
            elif args.leak == "metrics":
                outputs.append(output.argmax(dim=-1))
                kept_targets.append(targets)
            else:
                correct += (output.argmax(dim=-1) == targets).sum().item()
                seen += targets.numel()
    if outputs:
        predictions = torch.cat(outputs)
        if args.leak == "val-grad":
            predictions = predictions.argmax(dim=-1)
        labels = torch.cat(kept_targets)
        correct, seen = (predictions == labels).sum().item(), labels.numel()
    return total_loss / len(batches), correct / seen


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=["mlp", "lstm", "transformer"], default="mlp")
    parser.add_argument("--leak", default="none",
                        choices=["none", "total-local", "total-reset", "val-grad", "metrics",
                                 "global-list"])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--train-batches", type=int, default=80)
    parser.add_argument("--eval-batches", type=int, default=30)
    parser.add_argument("--log-interval", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--gamma", type=float, default=0.7, help="learning rate decay per epoch")
    parser.add_argument("--clip", type=float, default=0.25, help="gradient norm clipping")
    parser.add_argument("--exit-code", type=int, default=0)
    args = parser.parse_args()
    args.features, args.classes = 128, 10
    args.ntokens, args.bptt = 1000, 20
    torch.manual_seed(0)

    teacher = torch.randn(args.features, args.classes)
    train_data = make_batches(args, args.train_batches, teacher)
    val_data = make_batches(args, args.eval_batches, teacher)
    test_data = make_batches(args, args.eval_batches, teacher)
    if args.model == "mlp":
        model = MLP(args.features, 512, args.classes)
    elif args.model == "lstm":
        model = LSTMModel(args.ntokens, 32, 32, nlayers=2)
    else:
        model = TransformerModel(args.ntokens, 64, args.bptt)
    criterion = nn.NLLLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=args.gamma)

    for epoch in range(1, args.epochs + 1):
        epoch_started = time.time()
        train(args, model, optimizer, criterion, train_data, epoch)
        val_loss, val_accuracy = evaluate(args, model, criterion, val_data)
        print(f"| end of epoch {epoch:3d} | time {time.time() - epoch_started:5.2f}s | "
              f"valid loss {val_loss:5.2f} | valid acc {val_accuracy:5.3f}")
        scheduler.step()
    test_loss, test_accuracy = evaluate(args, model, criterion, test_data)
    print(f"| end of training | {args.model} | leak {args.leak} | test loss {test_loss:5.2f} | "
          f"test acc {test_accuracy:5.3f} | {len(history)} losses kept")
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())
