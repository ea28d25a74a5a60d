
SELECT wfe.register_worker('bench.step@1', 'bench');
SELECT wfe.register_worker('bench.rl@1', 'benchrl');
SELECT wfe.create_definition($y$name: bench-steps
version: "1.0.0"
entry: s001
stages:
  - name: s001
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s002
    on_failure: failed
  - name: s002
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s003
    on_failure: failed
  - name: s003
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s004
    on_failure: failed
  - name: s004
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s005
    on_failure: failed
  - name: s005
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s006
    on_failure: failed
  - name: s006
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s007
    on_failure: failed
  - name: s007
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s008
    on_failure: failed
  - name: s008
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s009
    on_failure: failed
  - name: s009
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s010
    on_failure: failed
  - name: s010
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s011
    on_failure: failed
  - name: s011
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s012
    on_failure: failed
  - name: s012
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s013
    on_failure: failed
  - name: s013
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s014
    on_failure: failed
  - name: s014
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s015
    on_failure: failed
  - name: s015
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s016
    on_failure: failed
  - name: s016
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s017
    on_failure: failed
  - name: s017
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s018
    on_failure: failed
  - name: s018
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s019
    on_failure: failed
  - name: s019
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s020
    on_failure: failed
  - name: s020
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s021
    on_failure: failed
  - name: s021
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s022
    on_failure: failed
  - name: s022
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s023
    on_failure: failed
  - name: s023
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s024
    on_failure: failed
  - name: s024
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s025
    on_failure: failed
  - name: s025
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s026
    on_failure: failed
  - name: s026
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s027
    on_failure: failed
  - name: s027
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s028
    on_failure: failed
  - name: s028
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s029
    on_failure: failed
  - name: s029
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s030
    on_failure: failed
  - name: s030
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s031
    on_failure: failed
  - name: s031
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s032
    on_failure: failed
  - name: s032
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s033
    on_failure: failed
  - name: s033
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s034
    on_failure: failed
  - name: s034
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s035
    on_failure: failed
  - name: s035
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s036
    on_failure: failed
  - name: s036
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s037
    on_failure: failed
  - name: s037
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s038
    on_failure: failed
  - name: s038
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s039
    on_failure: failed
  - name: s039
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s040
    on_failure: failed
  - name: s040
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s041
    on_failure: failed
  - name: s041
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s042
    on_failure: failed
  - name: s042
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s043
    on_failure: failed
  - name: s043
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s044
    on_failure: failed
  - name: s044
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s045
    on_failure: failed
  - name: s045
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s046
    on_failure: failed
  - name: s046
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s047
    on_failure: failed
  - name: s047
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s048
    on_failure: failed
  - name: s048
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s049
    on_failure: failed
  - name: s049
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s050
    on_failure: failed
  - name: s050
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s051
    on_failure: failed
  - name: s051
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s052
    on_failure: failed
  - name: s052
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s053
    on_failure: failed
  - name: s053
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s054
    on_failure: failed
  - name: s054
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s055
    on_failure: failed
  - name: s055
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s056
    on_failure: failed
  - name: s056
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s057
    on_failure: failed
  - name: s057
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s058
    on_failure: failed
  - name: s058
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s059
    on_failure: failed
  - name: s059
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s060
    on_failure: failed
  - name: s060
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s061
    on_failure: failed
  - name: s061
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s062
    on_failure: failed
  - name: s062
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s063
    on_failure: failed
  - name: s063
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s064
    on_failure: failed
  - name: s064
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s065
    on_failure: failed
  - name: s065
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s066
    on_failure: failed
  - name: s066
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s067
    on_failure: failed
  - name: s067
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s068
    on_failure: failed
  - name: s068
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s069
    on_failure: failed
  - name: s069
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s070
    on_failure: failed
  - name: s070
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s071
    on_failure: failed
  - name: s071
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s072
    on_failure: failed
  - name: s072
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s073
    on_failure: failed
  - name: s073
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s074
    on_failure: failed
  - name: s074
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s075
    on_failure: failed
  - name: s075
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s076
    on_failure: failed
  - name: s076
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s077
    on_failure: failed
  - name: s077
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s078
    on_failure: failed
  - name: s078
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s079
    on_failure: failed
  - name: s079
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s080
    on_failure: failed
  - name: s080
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s081
    on_failure: failed
  - name: s081
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s082
    on_failure: failed
  - name: s082
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s083
    on_failure: failed
  - name: s083
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s084
    on_failure: failed
  - name: s084
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s085
    on_failure: failed
  - name: s085
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s086
    on_failure: failed
  - name: s086
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s087
    on_failure: failed
  - name: s087
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s088
    on_failure: failed
  - name: s088
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s089
    on_failure: failed
  - name: s089
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s090
    on_failure: failed
  - name: s090
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s091
    on_failure: failed
  - name: s091
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s092
    on_failure: failed
  - name: s092
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s093
    on_failure: failed
  - name: s093
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s094
    on_failure: failed
  - name: s094
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s095
    on_failure: failed
  - name: s095
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s096
    on_failure: failed
  - name: s096
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s097
    on_failure: failed
  - name: s097
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s098
    on_failure: failed
  - name: s098
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s099
    on_failure: failed
  - name: s099
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: s100
    on_failure: failed
  - name: s100
    type: worker
    queue: bench
    worker: bench.step@1
    input: { x: "${context.x}" }
    on_success: completed
    on_failure: failed
$y$);
SELECT wfe.approve('bench-steps','1.0.0'); SELECT wfe.activate('bench-steps','1.0.0');
SELECT wfe.create_definition($y$name: bench-rl
version: "1.0.0"
entry: s001
stages:
  - name: s001
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s002
    on_failure: failed
  - name: s002
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s003
    on_failure: failed
  - name: s003
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s004
    on_failure: failed
  - name: s004
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s005
    on_failure: failed
  - name: s005
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s006
    on_failure: failed
  - name: s006
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s007
    on_failure: failed
  - name: s007
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s008
    on_failure: failed
  - name: s008
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s009
    on_failure: failed
  - name: s009
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s010
    on_failure: failed
  - name: s010
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s011
    on_failure: failed
  - name: s011
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s012
    on_failure: failed
  - name: s012
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s013
    on_failure: failed
  - name: s013
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s014
    on_failure: failed
  - name: s014
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s015
    on_failure: failed
  - name: s015
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s016
    on_failure: failed
  - name: s016
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s017
    on_failure: failed
  - name: s017
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s018
    on_failure: failed
  - name: s018
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s019
    on_failure: failed
  - name: s019
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s020
    on_failure: failed
  - name: s020
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s021
    on_failure: failed
  - name: s021
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s022
    on_failure: failed
  - name: s022
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s023
    on_failure: failed
  - name: s023
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s024
    on_failure: failed
  - name: s024
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s025
    on_failure: failed
  - name: s025
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s026
    on_failure: failed
  - name: s026
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s027
    on_failure: failed
  - name: s027
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s028
    on_failure: failed
  - name: s028
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s029
    on_failure: failed
  - name: s029
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s030
    on_failure: failed
  - name: s030
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s031
    on_failure: failed
  - name: s031
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s032
    on_failure: failed
  - name: s032
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s033
    on_failure: failed
  - name: s033
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s034
    on_failure: failed
  - name: s034
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s035
    on_failure: failed
  - name: s035
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s036
    on_failure: failed
  - name: s036
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s037
    on_failure: failed
  - name: s037
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s038
    on_failure: failed
  - name: s038
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s039
    on_failure: failed
  - name: s039
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s040
    on_failure: failed
  - name: s040
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s041
    on_failure: failed
  - name: s041
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s042
    on_failure: failed
  - name: s042
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s043
    on_failure: failed
  - name: s043
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s044
    on_failure: failed
  - name: s044
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s045
    on_failure: failed
  - name: s045
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s046
    on_failure: failed
  - name: s046
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s047
    on_failure: failed
  - name: s047
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s048
    on_failure: failed
  - name: s048
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s049
    on_failure: failed
  - name: s049
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s050
    on_failure: failed
  - name: s050
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s051
    on_failure: failed
  - name: s051
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s052
    on_failure: failed
  - name: s052
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s053
    on_failure: failed
  - name: s053
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s054
    on_failure: failed
  - name: s054
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s055
    on_failure: failed
  - name: s055
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s056
    on_failure: failed
  - name: s056
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s057
    on_failure: failed
  - name: s057
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s058
    on_failure: failed
  - name: s058
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s059
    on_failure: failed
  - name: s059
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s060
    on_failure: failed
  - name: s060
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s061
    on_failure: failed
  - name: s061
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s062
    on_failure: failed
  - name: s062
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s063
    on_failure: failed
  - name: s063
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s064
    on_failure: failed
  - name: s064
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s065
    on_failure: failed
  - name: s065
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s066
    on_failure: failed
  - name: s066
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s067
    on_failure: failed
  - name: s067
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s068
    on_failure: failed
  - name: s068
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s069
    on_failure: failed
  - name: s069
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s070
    on_failure: failed
  - name: s070
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s071
    on_failure: failed
  - name: s071
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s072
    on_failure: failed
  - name: s072
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s073
    on_failure: failed
  - name: s073
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s074
    on_failure: failed
  - name: s074
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s075
    on_failure: failed
  - name: s075
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s076
    on_failure: failed
  - name: s076
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s077
    on_failure: failed
  - name: s077
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s078
    on_failure: failed
  - name: s078
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s079
    on_failure: failed
  - name: s079
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s080
    on_failure: failed
  - name: s080
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s081
    on_failure: failed
  - name: s081
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s082
    on_failure: failed
  - name: s082
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s083
    on_failure: failed
  - name: s083
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s084
    on_failure: failed
  - name: s084
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s085
    on_failure: failed
  - name: s085
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s086
    on_failure: failed
  - name: s086
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s087
    on_failure: failed
  - name: s087
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s088
    on_failure: failed
  - name: s088
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s089
    on_failure: failed
  - name: s089
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s090
    on_failure: failed
  - name: s090
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s091
    on_failure: failed
  - name: s091
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s092
    on_failure: failed
  - name: s092
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s093
    on_failure: failed
  - name: s093
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s094
    on_failure: failed
  - name: s094
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s095
    on_failure: failed
  - name: s095
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s096
    on_failure: failed
  - name: s096
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s097
    on_failure: failed
  - name: s097
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s098
    on_failure: failed
  - name: s098
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s099
    on_failure: failed
  - name: s099
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: s100
    on_failure: failed
  - name: s100
    type: worker
    queue: benchrl
    worker: bench.rl@1
    input: { x: "${context.x}" }
    rate_limit: fast
    on_success: completed
    on_failure: failed
$y$);
SELECT wfe.approve('bench-rl','1.0.0'); SELECT wfe.activate('bench-rl','1.0.0');

-- The accuracy run: one stage taking a token of `acc` per attempt.
SELECT wfe.register_worker('bench.acc@1', 'benchacc');
SELECT wfe.create_definition($y$name: bench-acc
version: "1.0.0"
entry: a
stages:
  - name: a
    type: worker
    queue: benchacc
    worker: bench.acc@1
    rate_limit: acc
    on_success: completed
    on_failure: failed
$y$);
SELECT wfe.approve('bench-acc','1.0.0'); SELECT wfe.activate('bench-acc','1.0.0');
