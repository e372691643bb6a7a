#!/usr/bin/env bash
# Static checks of deploy/: Prometheus config and rules with promtool (check config, check rules, and the
# rule unit tests in mmserve_rules_test.yml, which prove each SLO alert fires exactly when it should); every
# Kubernetes manifest parses as YAML and carries SPEC 5.2's values (readiness HTTP GET /healthz with
# initialDelaySeconds 10, liveness TCP with failureThreshold 3, CPU limit/request <= 2.5, a GPU node selector
# and GPU limit, PodDisruptionBudget minAvailable >= 3, HPA on mmserve_queue_depth, selectors that match);
# the Locust file compiles. No cluster needed (there is none here); a live Prometheus is exercised by
# client_test.sh prometheus.
#
#   tests/e2e/deploy_check.sh SOURCE_DIR          (ctest: e2e_deploy_check)
set -euo pipefail
SRC=$(realpath "${1:?source directory}")
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

promtool check config "$SRC/deploy/prometheus/prometheus.yml"
promtool check rules "$SRC/deploy/prometheus/mmserve_rules.yml"
promtool test rules "$SRC/deploy/prometheus/mmserve_rules_test.yml"
"$PY" -c 'import sys; compile(open(sys.argv[1]).read(), sys.argv[1], "exec")' "$SRC/deploy/locust/locustfile.py"

"$PY" - "$SRC/deploy/k8s" <<'PY'
import glob, os, sys
import yaml

def cpu(q):  # "500m" -> 0.5, "4" -> 4.0
    q = str(q)
    return float(q[:-1]) / 1000 if q.endswith("m") else float(q)

docs = {}
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.yaml"))):
    for doc in yaml.safe_load_all(open(path)):
        assert doc and "kind" in doc and "apiVersion" in doc, f"{path}: not a Kubernetes object"
        docs.setdefault(doc["kind"], []).append(doc)
        print(f"ok  {os.path.basename(path)}: {doc['kind']} {doc.get('metadata', {}).get('name', '')}")

(deploy,) = docs["Deployment"]
labels = deploy["spec"]["template"]["metadata"]["labels"]
selector = deploy["spec"]["selector"]["matchLabels"]
assert all(labels.get(k) == v for k, v in selector.items()), "Deployment selector does not match its pods"
pod = deploy["spec"]["template"]["spec"]
assert pod["nodeSelector"], "no GPU node selector"
assert any("gpu" in k for k in pod["nodeSelector"]), pod["nodeSelector"]
(c,) = pod["containers"]
res = c["resources"]
ratio = cpu(res["limits"]["cpu"]) / cpu(res["requests"]["cpu"])
assert 1 <= ratio <= 2.5, f"CPU limit/request = {ratio}"
assert res["limits"].get("nvidia.com/gpu"), "no GPU limit"
assert res["requests"].get("memory") and res["limits"].get("memory"), "memory requests/limits"
ready, live = c["readinessProbe"], c["livenessProbe"]
assert ready["httpGet"]["path"] == "/healthz" and ready["initialDelaySeconds"] == 10, ready
assert "tcpSocket" in live and live["failureThreshold"] == 3, live
port_names = {p["name"] for p in c["ports"]}
assert ready["httpGet"]["port"] in port_names and live["tcpSocket"]["port"] in port_names
assert c["args"][0] == "serve" and any(a.startswith("--host=0.0.0.0") for a in c["args"]), c["args"]
assert pod["terminationGracePeriodSeconds"] > 30, "grace period must cover --drain-timeout 30"

(svc,) = docs["Service"]
assert all(labels.get(k) == v for k, v in svc["spec"]["selector"].items()), "Service selects no pod"
assert svc["spec"]["ports"][0]["targetPort"] in port_names

(pdb,) = docs["PodDisruptionBudget"]
assert pdb["spec"]["minAvailable"] >= 3, pdb["spec"]
assert all(labels.get(k) == v for k, v in pdb["spec"]["selector"]["matchLabels"].items())

(hpa,) = docs["HorizontalPodAutoscaler"]
assert hpa["apiVersion"] == "autoscaling/v2"
assert hpa["spec"]["scaleTargetRef"]["name"] == deploy["metadata"]["name"]
assert hpa["spec"]["minReplicas"] > pdb["spec"]["minAvailable"], "the PDB would block every eviction"
names = [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"]
assert names == ["mmserve_queue_depth"], names

(adapter,) = docs["ConfigMap"]
rules = yaml.safe_load(adapter["data"]["config.yaml"])["rules"]
assert any(r["name"]["as"] == "mmserve_queue_depth" for r in rules)
(sm,) = docs["ServiceMonitor"]
assert sm["spec"]["endpoints"][0]["port"] in {p["name"] for p in svc["spec"]["ports"]}

kust = docs["Kustomization"][0]
for res_file in kust["resources"]:
    assert os.path.isfile(os.path.join(sys.argv[1], res_file)), res_file
print("k8s manifests: SPEC 5.2 values present")
PY
echo "PASS: deploy"
