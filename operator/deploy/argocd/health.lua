-- Argo CD health check for devops.jokerbai.com/Spotpool (argocd-cm key:
-- resource.customizations.health.devops.jokerbai.com_Spotpool). It reads the kstatus
-- conditions the operator writes (Reconciling, Stalled beside Ready) and observedGeneration.
local hs = { status = "Progressing", message = "Waiting for the operator to report a status" }
if obj.metadata ~= nil and obj.metadata.deletionTimestamp ~= nil then
  hs.message = "Deleting: the operator destroys the pool's stack (Retain: forgets it)"
  return hs
end
if obj.status == nil then
  return hs
end
local conditions = {}
if obj.status.conditions ~= nil then
  for _, condition in ipairs(obj.status.conditions) do
    conditions[condition.type] = condition
  end
end
local function said(condition)
  if condition.message ~= nil and condition.message ~= "" then
    return condition.reason .. ": " .. condition.message
  end
  return condition.reason
end
local function holds(name)
  return conditions[name] ~= nil and conditions[name].status == "True"
end
local generation = obj.metadata and obj.metadata.generation
if generation ~= nil and obj.status.observedGeneration ~= generation then
  hs.message = "Waiting for the operator to act on generation " .. generation
  if holds("Reconciling") then
    hs.message = said(conditions["Reconciling"])
  end
  return hs
end
if holds("Stalled") then
  hs.status = "Degraded"
  hs.message = said(conditions["Stalled"])
  return hs
end
if obj.status.phase == "Paused" then
  hs.status = "Suspended"
  hs.message = "spec.paused is true: the operator changes nothing in this pool"
  return hs
end
if holds("Reconciling") then
  hs.message = said(conditions["Reconciling"])
  return hs
end
if holds("Ready") then
  hs.status = "Healthy"
  hs.message = said(conditions["Ready"])
  if holds("Degraded") then
    hs.message = hs.message .. " (last check failed: " .. said(conditions["Degraded"]) .. ")"
  end
  return hs
end
-- An operator from before the kstatus conditions: Ready and Degraded alone.
if holds("Degraded") then
  hs.status = "Degraded"
  hs.message = said(conditions["Degraded"])
elseif conditions["Ready"] ~= nil then
  hs.message = said(conditions["Ready"])
end
return hs
