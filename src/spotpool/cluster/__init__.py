"""A local Kubernetes control plane: etcd and kube-apiserver on loopback, no kubelet."""
