"""What it runs on: machine, GPU and network presets with their sources, the calibrated profile, what the machine
lets a run start."""
