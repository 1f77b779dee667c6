-- Argo CD health of a gpumix LLMService (gpumix.io/v1alpha1), from the status the operator
-- writes: observedGeneration and the Ready condition (reasons in gpumix.reconcile).
--   Healthy      the operator has seen this generation and Ready is True (Serving)
--   Progressing  no status yet, an older generation observed, Ready missing or Unknown,
--                or Ready False with reason RollingOut (new replicas starting) or
--                Unschedulable (pods wait for room on a node: an autoscaler adds one)
--   Degraded     Ready False for any other reason: InvalidSpec, Unservable,
--                InsufficientCapacity, NoUsablePool, SolverFailed (the last good plan, if
--                any, keeps serving; the message says what to fix)
local hs = {}
local status = obj.status
if status == nil or status.observedGeneration == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the gpumix operator to plan this service"
  return hs
end
local generation = obj.metadata.generation
if generation ~= nil and status.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the gpumix operator to plan generation " .. tostring(generation)
    .. " (observed " .. tostring(status.observedGeneration) .. ")"
  return hs
end
local ready = nil
if status.conditions ~= nil then
  for _, condition in ipairs(status.conditions) do
    if condition.type == "Ready" then
      ready = condition
    end
  end
end
if ready == nil or ready.status == "Unknown" then
  hs.status = "Progressing"
  hs.message = "Waiting for the Ready condition"
  return hs
end
local message = ready.message or ""
if ready.reason ~= nil then
  message = ready.reason .. ": " .. message
end
if ready.status == "True" then
  hs.status = "Healthy"
elseif ready.reason == "RollingOut" or ready.reason == "Unschedulable" then
  hs.status = "Progressing"
else
  hs.status = "Degraded"
end
hs.message = message
return hs
