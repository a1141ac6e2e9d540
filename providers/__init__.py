"""Provider plugins: one module per provider, plus `base` (contract, registry, shared HTTP)."""
