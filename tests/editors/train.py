import torch

model = build_model()
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
gpu_memory_gb = 80
model_size_gb = 14
headroom_gb = gpu_memory_gb - model_size_gb * 2
accum_steps = 4
for step, (inputs, labels) in enumerate(loader):
    loss = loss_fn(model(inputs), labels)
    loss.backward()
    if (step + 1) % accum_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
