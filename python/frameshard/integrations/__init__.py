"""frameshard inside the trainers people run: one call after the trainer is built.

    from frameshard.integrations import trl as fs_trl
    trainer = trl.GRPOTrainer(model=..., reward_funcs=..., args=GRPOConfig(...), ...)
    fs_trl.enable(trainer)          # each distinct image encoded once across all processes
    trainer.train()

`trl`: TRL's GRPOTrainer (the optional extra `frameshard[trl]`). See docs/trl.md.
"""
