"""The pure ConfigMap edits: what the controller's writers apply, and what ``render``,
``doctor`` and ``cleanup`` compute without writing. Each is a function of the object as read.

    configmap.py       our label, keys set, one key's text rewritten
    coredns.py         CorednsEdit: our rules in the Corefile (EditError when one cannot apply)
    coredns_import.py  ImportEdit: the coredns-custom import key
    revert_policy.py   what to do when someone else's write removed our change
"""
