"""Provider plugins (installed as `rentopt.providers`): one module per provider, plus `base`
(contract, registry, shared HTTP). A third-party plugin subclasses `rentopt.providers.base.Provider`
and registers it under the entry-point group `rentopt.providers`."""
