"""`biosrecall leaderboard`: looped recipes x depth schedules at matched modeled FLOPs, on bioS and text.

    biosrecall leaderboard --bios-data data/bios-100 --lm-data data/lm-kjv --out runs/leaderboard
    biosrecall leaderboard --bios-data ... --lm-data ... --out runs/leaderboard --plan
    biosrecall leaderboard --out runs/leaderboard --archive docs/results/leaderboard

The study is declared in `biosrecall.experiments.leaderboard`; this command is `biosrecall study
leaderboard` under its own name, its options read from the declaration.
"""

from biosrecall.cli.study import study_command

leaderboard = study_command("leaderboard")
