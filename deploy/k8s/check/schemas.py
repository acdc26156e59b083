"""Writes the JSON Schemas kubeconform checks deploy/k8s/ against, from sources fetched from
the Go module proxy (no internet at check time beyond it):

- Kubernetes kinds from the OpenAPI document of the `k8s.io/kubernetes` module
  (api/openapi-spec/swagger.json): one self-contained schema per kind the manifests use, every
  object closed to unknown fields (as kubeconform's strict schemas are), int-or-string as
  either;
- KEDA's ScaledObject from the CRD of the `github.com/kedacore/keda/v2` module
  (config/crd/bases/keda.sh_scaledobjects.yaml), closed the same way (except where the CRD
  keeps unknown fields).

Usage: schemas.py SWAGGER_JSON KEDA_CRD_YAML OUT_DIR. Files are named
`<group>_<kind>_<version>.json` (kind lowercase; `v1` as the core group's), which check-k8s
passes to kubeconform as `{{ .Group }}_{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json`.
"""

import json
import sys

import yaml

# The Kubernetes kinds the manifests use.
KINDS = {
    ("", "v1", "ConfigMap"),
    ("", "v1", "Service"),
    ("apps", "v1", "Deployment"),
    ("batch", "v1", "Job"),
    ("networking.k8s.io", "v1", "Ingress"),
    ("policy", "v1", "PodDisruptionBudget"),
}


def closed(schema):
    """The schema with every object that lists its properties closed to others."""
    if isinstance(schema, dict):
        schema = {k: closed(v) for k, v in schema.items()}
        if schema.get("format") == "int-or-string":
            return {"oneOf": [{"type": "string"}, {"type": "integer"}]}
        open_ = schema.get("x-kubernetes-preserve-unknown-fields", False)
        if "properties" in schema and "additionalProperties" not in schema and not open_:
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [closed(v) for v in schema]
    return schema


def kubernetes(swagger_path, out):
    with open(swagger_path) as f:
        definitions = json.load(f)["definitions"]
    everything = {name: closed(d) for name, d in definitions.items()}
    written = 0
    for name, definition in definitions.items():
        for gvk in definition.get("x-kubernetes-group-version-kind", []):
            key = (gvk["group"], gvk["version"], gvk["kind"])
            if key not in KINDS:
                continue
            schema = {"$ref": f"#/definitions/{name}", "definitions": everything}
            # kubeconform's `.Group` is the apiVersion's first part: `v1` for the core group.
            group = gvk["group"] or gvk["version"]
            path = f"{out}/{group}_{gvk['kind'].lower()}_{gvk['version']}.json"
            with open(path, "w") as f:
                json.dump(schema, f)
            written += 1
    if written != len(KINDS):
        sys.exit(f"found {written} of the {len(KINDS)} Kubernetes kinds in {swagger_path}")


def keda(crd_path, out):
    with open(crd_path) as f:
        crd = yaml.safe_load(f)
    group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
    for version in crd["spec"]["versions"]:
        with open(f"{out}/{group}_{kind.lower()}_{version['name']}.json", "w") as f:
            json.dump(closed(version["schema"]["openAPIV3Schema"]), f)


if __name__ == "__main__":
    swagger, crd, out = sys.argv[1:4]
    kubernetes(swagger, out)
    keda(crd, out)
