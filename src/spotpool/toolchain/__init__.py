"""Pinned upstream tools (Pulumi, plugins, kube-apiserver, etcd), cached outside the clone."""
