-- 9 x /index.html, then 1 x /img/logo.png, repeated; requests pre-formatted
local reqs, i = {}, 0
init = function(args)
    for k = 1, 10 - 1 do reqs[k] = wrk.format("GET", "/index.html") end
    reqs[10] = wrk.format("GET", "/img/logo.png")
end
request = function()
    i = i % 10 + 1
    return reqs[i]
end
