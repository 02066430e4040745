"""An example of a user's own PyTorch model for simasgd (scenarios/torch/cnn.toml).

``models.make`` returns the module, ``data.make`` the data; the scenario names
them as ``"torch_example.models:make"`` and ``"torch_example.data:make"``, and
simasgd imports them from the scenario's folder.
"""
