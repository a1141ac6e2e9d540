"""rentopt's engine (installed as `rentopt.optimizer`): everything that is not talking to a provider."""
