"""The AgentChat operator (operator/README.md): signing keys, the service token and checkpoint
pruning, with kopf.

    main.py         the kopf handlers, each calling a plain function in handlers/
    rotation.py     the key stages, pure; resume_keys.py: the resume keys, pure
    tokens.py       when the service-token Secret must be re-minted
    pruning.py      checkpoint pruning, driven by our conversations table
    kube.py         Secrets and ConfigMaps, every write conditional on what was read
    spec.py         the AgentChat spec as typed models; status.py: conditions and timestamps
    constants.py    API group, label keys, Secret keys, condition types
    metrics.py      the operator's Prometheus metrics
    settings.py     OperatorSettings (AGENTCHAT_OPERATOR_<NAME>)
    cli.py          `agentchat operator`; uninstall.py: `agentchat operator finalize`
"""
